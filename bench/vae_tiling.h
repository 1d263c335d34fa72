// octodiff-bench --vae-tiling on|off|auto: the memory of one VAE decode, whole or in tiles
// (pipeline/tiled_decode.h). Only the model's VAE decoder is loaded (packed in the dtype), one
// image of height × width is decoded from pseudo-random latents; the report gives the resident
// memory before the decode and the process's peak after it (their difference: the decode's
// activations). Nothing is timed: run it under /usr/bin/time -v for the kernel's own figure.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "pipeline/generation.h"

namespace octodiff::bench {

struct VaeTilingOptions {
  int height = 1024, width = 1024, threads = 0;
  VaeTiling tiling;  // mode from --vae-tiling; tile and overlap the defaults
  ComputeDType dtype = ComputeDType::F32;
};

nlohmann::json run_vae_tiling_bench(const std::filesystem::path& model, const VaeTilingOptions& o);
void print_vae_tiling_bench(const nlohmann::json& j);

}  // namespace octodiff::bench
