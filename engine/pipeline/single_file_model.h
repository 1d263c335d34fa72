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
  // SDXL: the second text tower and its tokenizer folder (tokenizer_2/ beside the tokenizer
  // folder); text_encoder_2 is null for SD 1.x/2.x.
  std::shared_ptr<WeightSource> text_encoder_2;
  ClipTextConfig text_2_config;
  std::filesystem::path tokenizer_2_dir;
  UNetConfig unet_config;
  VaeConfig vae_config;
  std::string scheduler_json;
};

// The tokenizer comes from options.tokenizer_dir, else a tokenizer/ folder beside the file; with
// neither, the error says exactly what to provide. SDXL's second tokenizer is the tokenizer_2/
// folder beside that tokenizer folder (as in an SDXL diffusers folder).
SingleFileParts load_single_file_parts(const std::filesystem::path& file, const ModelLoadOptions& options);

}  // namespace octodiff
