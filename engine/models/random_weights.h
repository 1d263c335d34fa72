// The deterministic random weights of `octodiff-cli make-random-model` (cli/random_model_command.h),
// for any configuration: full-size models for benchmarks, small ones in tests (both layouts of
// the same weights). Values come from the parameter catalogs' synthetic initialisation
// (models/parameter_catalog.h) and depend only on (seed, component, tensor name, element index).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "io/single_file.h"
#include "models/configs.h"
#include "models/parameter_catalog.h"

namespace octodiff {

// The seed of component k (0 UNet, 1 VAE, 2 text encoder, 3 single-file extras, 4 text encoder 2 or
// TAESD, 5 ControlNet) of a model made with `seed`.
uint64_t component_seed(uint64_t seed, int component);

// The catalog's tensors with their synthetic values, made when written.
std::vector<DiffusersTensor> random_tensors(const std::vector<ParameterSpec>& specs, uint64_t seed);

// The weights make-random-model writes, for any configuration (tests use small ones): every
// tensor of the components' parameter catalogs, diffusers-named, values made when written and
// depending only on (seed, component, tensor name, element index).
struct RandomModelWeights {
  std::vector<DiffusersTensor> unet, vae, text_encoder;
  std::vector<DiffusersTensor> text_encoder_2;  // SDXL's CLIPTextModelWithProjection; empty otherwise
};
RandomModelWeights random_model_weights(const UNetConfig& unet, const VaeConfig& vae, const ClipTextConfig& text,
                                        const ClipTextConfig* text_2, uint64_t seed);

// Those weights as the single-file (ldm) checkpoint of `family` that --layout single-file writes
// (contents.metadata left empty): the same values, tensor by tensor, as the diffusers layout, plus
// the tensors real files carry that the diffusers model does not use (random) and the non-weight
// buffers (alphas_cumprod, position_ids, global_step when given).
SingleFileContents random_single_file_contents(const RandomModelWeights& weights, SingleFileCheckpoint::Family family,
                                               uint64_t seed, std::optional<int64_t> global_step = std::nullopt);

}  // namespace octodiff
