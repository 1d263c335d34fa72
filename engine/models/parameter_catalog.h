// Parameter catalogs: every tensor each model's `load` takes for a given config, by diffusers
// name and shape, in load order — without loading anything. They mirror
// ClipTextModel/UNet2DCondition/AutoencoderKL::load exactly (tests check both against the tiny
// model's files and against the loaders themselves), and serve tools that write models from
// scratch (octodiff-cli make-random-model) and the spec's parameter-count checksums.
//
// The catalog also defines a deterministic synthetic initialisation for such tools: values that
// depend only on (seed, parameter name, element index) — so every file layout and thread count
// gives the same model — scaled so activations stay of order one through the networks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/configs.h"
#include "models/controlnet.h"

namespace octodiff {

enum class ParameterKind {
  Weight,     // linear / conv weight: fan-in = product of all dims but the first
  Bias,       // bias of a linear / conv
  NormScale,  // GroupNorm / LayerNorm weight
  NormShift,  // GroupNorm / LayerNorm bias
  Embedding,  // token / position embedding table
};

struct ParameterSpec {
  std::string name;
  Shape shape;
  ParameterKind kind = ParameterKind::Weight;
};

std::vector<ParameterSpec> clip_text_parameters(const ClipTextConfig& config);
// CLIPTextModelWithProjection (SDXL's text_encoder_2): text_projection, then the text model's.
std::vector<ParameterSpec> clip_text_projection_parameters(const ClipTextConfig& config);
std::vector<ParameterSpec> unet_parameters(const UNetConfig& config);
// `with_encoder = false` lists only what AutoencoderKL::load takes for decoding.
std::vector<ParameterSpec> vae_parameters(const VaeConfig& config, bool with_encoder = true);

// What AutoencoderTiny::load takes (diffusers names); the decoder only when !with_encoder.
std::vector<ParameterSpec> autoencoder_tiny_parameters(const AutoencoderTinyConfig& config, bool with_encoder = true);

// What ControlNetModel::load takes: the UNet's time embedding, conv_in, down and mid blocks, the
// conditioning embedding and the 1×1 zero convolutions.
std::vector<ParameterSpec> controlnet_parameters(const ControlNetConfig& config);

int64_t parameter_count(const std::vector<ParameterSpec>& params);

// Fills shape_numel(p.shape) floats at dst: weights ~ N(0, 1/fan_in) (approximately normal:
// an Irwin–Hall sum of four uniforms, bounded by ±3.5σ), biases ~ 0.01·N(0, 1), embeddings
// ~ 0.02·N(0, 1), norm scales 1 and shifts 0. Runs in parallel over the current device.
void synthetic_parameter_values(const ParameterSpec& p, uint64_t seed, float* dst);
// The same generator for a tensor identified only by name (weight-like when rank ≥ 2).
void synthetic_values(const std::string& name, const Shape& shape, uint64_t seed, float* dst);

}  // namespace octodiff
