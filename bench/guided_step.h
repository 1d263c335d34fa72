// octodiff-bench's default report (--arch sd15 | sdxl): a guided step's cost on a loaded model.
//
// Measured, each as the median of the calls after the first (the first reported on its own):
//   - the pipeline (ShardedPipeline::run) end to end, twice: the first call compiles, the second
//     reuses the plan; with --img2img the same request again from an init image;
//   - the networks alone, phase by phase as the pipeline runs them (each network's weights mapped
//     in before it runs, dropped after): the text encoder on [uncond; cond] (2×77 tokens; SDXL:
//     both towers and the text_time conditioning), the UNet at batch 2 (a guided step) and batch
//     1 with their analytic and executed FLOPs, and the VAE decode; a 0.1 s peak probe runs before
//     each of those calls and after it (outside its time), and <k>_fraction_of_adjacent_peak is
//     the steady calls' median rate over the probes around them (bench_timing.h), beside
//     <k>_fraction_of_peak (over the larger of the peaks measured at start-up and at the end).
// Every figure goes to the report's top level (the keys check_bench_json.sh checks).
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/arena.h"
#include "pipeline/generation.h"
#include "pipeline/model.h"

namespace octodiff::bench {

struct GuidedStepOptions {
  int height = 512, width = 512;
  int threads = 2, repeats = 3;
  int devices = 1, steps = 1;      // the pipeline's request
  ComputeDType dtype = ComputeDType::F32;
  bool skip_vae = false;           // no VAE decode timed
  std::optional<double> img2img;   // the strength of an image-to-image run after the pipeline's
};

// The pipeline's two calls: compile_seconds, cached_compile_seconds, the "pipeline" section and,
// with o.img2img, "img2img". Reads j's load_seconds and load_from_cache (a load that packed gets
// compile_with_packing_seconds).
void time_pipeline(const std::shared_ptr<const StableDiffusionModel>& model, const GuidedStepOptions& o,
                   nlohmann::json& j);

// The networks alone, their activations from `arena` (installed by the caller): text_encode_*,
// unet_b2_*, unet_b1_*, the memory after the UNet, vae_decode_*, peak_rss_mb and arena_peak_mb.
void time_networks(const StableDiffusionModel& model, const GuidedStepOptions& o, CachingArena& arena,
                   nlohmann::json& j);

// The networks' lines (text encoding to img2img) on stdout; j has its fractions of peak by then.
void print_networks(const nlohmann::json& j);

}  // namespace octodiff::bench
