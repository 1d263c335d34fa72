// Single-file checkpoints (.safetensors with ldm keys): detection, configurations and the tokenizer
// folder that has to come from elsewhere, turned into the parts StableDiffusionModel loads.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "io/weight_source.h"
#include "models/configs.h"
#include "pipeline/model.h"

namespace octodiff {

struct SingleFileParts {
  std::string description;  // e.g. "SD 1.x single-file checkpoint"
  std::filesystem::path tokenizer_dir;
  std::shared_ptr<WeightSource> text_encoder, unet, vae;
  ClipTextConfig text_config;
  UNetConfig unet_config;
  VaeConfig vae_config;
  std::string scheduler_json;
};

// The tokenizer comes from options.tokenizer_dir, else a tokenizer/ folder beside the file; with
// neither, the error says exactly what to provide.
SingleFileParts load_single_file_parts(const std::filesystem::path& file, const ModelLoadOptions& options);

}  // namespace octodiff
