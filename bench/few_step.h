// octodiff-bench's few-step mode (--arch sd-turbo | lcm-sd15): what issue 20 asks of one-step and
// four-step models end to end, on a loaded model with a tiny autoencoder (TAESD) beside it.
//
// Measured, each as the median of the calls after the first (the first reported on its own):
//   - the networks alone, as a few-step pipeline calls them: the text encoder on one prompt (no
//     negative prompt: SD-Turbo runs at guidance 0, an LCM UNet takes guidance as an embedding),
//     one UNet call at batch 1 (LCM: with the guidance embedding; one-pass runs take rounded bf16
//     activations in every call, pipeline/denoise_loop.cpp), the SD VAE's decode and TAESD's
//     decode of one 512×512 image;
//   - the pipeline (ShardedPipeline::run) end to end: an image at the mode's steps decoded by
//     TAESD and by the VAE, a one-step image with TAESD (the same run as the first when steps is
//     1), and a 2×4 grid of one-step images with TAESD (8 devices);
//   - the ratio checks: one-step image ≤ 1.15 × one UNet batch-1 call, TAESD decode ≤ 10 %
//     of a UNet call, the 2×4 grid ≤ 10 × one image (targets stated for bf16 on 2 threads);
//     the first two also in pairs (`…_in_pairs`: a UNet call, a TAESD decode and a one-step image
//     one after another, the median of each round's ratios), since a shared VM's speed drifts
//     over the minutes between the networks' timing and the images'.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/generation.h"
#include "pipeline/model.h"

namespace octodiff::bench {

struct FewStepOptions {
  std::string arch;          // "sd-turbo" or "lcm-sd15"
  int steps = 1;             // the image's steps (the one-step image and grid always take 1)
  double guidance = 0;       // SD-Turbo: 0 (one pass, no negative prompt); LCM: the embedded scale
  int height = 512, width = 512;
  int threads = 2, repeats = 3;
  int grid_devices = 8;      // a 2×4 grid, one image per device
  bool grid = true;          // false: no grid run (and no grid check)
  bool image_vae = true;     // false: no end-to-end image decoded by the VAE (its decode is still timed)
  ComputeDType dtype = ComputeDType::F32;
};

// The architecture's own settings: sd-turbo 1 step at guidance 0, lcm-sd15 4 steps at 8.5
// (LatentConsistencyModelPipeline's default). Errors for another name.
FewStepOptions few_step_defaults(const std::string& arch);

// Checks that the model is the architecture asked for (an LCM UNet has time_cond_proj_dim, an
// SD-Turbo one has not) and has a tiny autoencoder; runs everything above and returns the
// `few_step` JSON section.
nlohmann::json run_few_step(const std::shared_ptr<const StableDiffusionModel>& model, const FewStepOptions& o);

// The section as text lines on stdout.
void print_few_step(const nlohmann::json& few_step);

}  // namespace octodiff::bench
