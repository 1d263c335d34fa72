// octodiff-bench's ControlNet mode (--controlnet random|PATH): a ControlNet's cost per guided
// step beside the UNet's (issue 22 item 9), on the loaded model at the asked size.
//
// Measured at batch 2 (a guided step: the same latents with the negative and the positive
// prompt, the control image twice), each the median of the calls after the first (the first
// reported on its own): the UNet alone, the ControlNet alone, the UNet taking the ControlNet's
// residuals; and from them a guided step with one ControlNet (ControlNet + UNet with residuals)
// and the ControlNet's share of it. The calls use the bf16 activations a pipeline's later steps
// use (kernels::Bf16Activations::Rounded) when the model is bf16. On an SDXL model both networks
// take pooled text embeddings and the default time ids (text_time). Beside the seconds: both
// networks' analytic FLOPs per guided step (models/flop_count.h) and the GFLOP/s they ran at.
#pragma once

#include <nlohmann/json.hpp>

#include "models/controlnet.h"
#include "pipeline/model.h"

namespace octodiff::bench {

struct ControlNetBenchOptions {
  int height = 512, width = 512;
  int threads = 2, repeats = 3;
};

// Checks that the ControlNet fits the model's UNet and dtype; returns the "controlnet" section.
nlohmann::json run_controlnet_bench(const StableDiffusionModel& model, const ControlNetModel& controlnet,
                                    const ControlNetBenchOptions& o);

void print_controlnet_bench(const nlohmann::json& section);

}  // namespace octodiff::bench
