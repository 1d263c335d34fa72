// The weights of one diffusers component folder (<model>/unet, …) in whichever format it holds:
// safetensors (diffusers' torch files, variants and shards) or Flax msgpack
// (diffusion_flax_model.msgpack / flax_model.msgpack, io/flax_msgpack.h).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/flax_msgpack.h"
#include "io/weight_source.h"

namespace octodiff {

struct ComponentWeights {
  std::vector<std::filesystem::path> files;  // what the weights were read from
  std::shared_ptr<WeightSource> source;      // by PyTorch parameter name
  std::optional<DType> flax_dtype;           // read from Flax msgpack: the dtype of most of its bytes
};

// A component's files: `safetensors_base` ("diffusion_pytorch_model", "model") as
// component_weight_files finds them (honouring `variant`), or the Flax file `flax_name` when the
// folder has no safetensors or `prefer_flax` asks for it (a folder with both prefers safetensors).
ComponentWeights open_component_weights(const std::filesystem::path& dir, const std::string& safetensors_base,
                                        const std::string& flax_name, FlaxNaming naming,
                                        const std::string& variant, bool prefer_flax);

// "Flax msgpack (bf16)", "Flax msgpack (f32)": how the model panel names a Flax folder.
std::string flax_format_description(DType dtype);

}  // namespace octodiff
