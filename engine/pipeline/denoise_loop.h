// Stage 3: the denoising loop of one device — N × (UNet → guidance → scheduler step).
//
// Every pipeline of the family runs this loop; what differs between them is how a step's noise
// prediction is formed (GuidanceKind) and, for later pipelines, what is added to the model input.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/numerics.h"
#include "models/unet_2d_condition.h"
#include "schedulers/scheduler.h"

namespace octodiff {

// How one step's noise prediction comes from the UNet.
enum class GuidanceKind {
  // Classifier-free guidance: [uncond; cond] in one batch, noise = u + g·(c − u).
  ClassifierFree,
  // The prompts alone in one pass, noise = c (no negative prompt).
  None,
};

// What every device of a run shares (owned by the plan and the model).
struct DenoiseSetup {
  const UNet2DCondition* unet = nullptr;
  const Scheduler* scheduler = nullptr;
  const SchedulerState* initial_state = nullptr;
  int calls = 0;                 // UNet calls per device
  Numerics numerics;
  GuidanceKind guidance = GuidanceKind::ClassifierFree;
  float guidance_scale = 7.5f;
};

// Called after each step with the call index, its seconds and the latents (B, h, w, C) after it.
using StepObserver = std::function<void(int call, double seconds, const Tensor& latents)>;

// Runs every step on x (B, h, w, C), the initial latents already scaled by init_noise_sigma,
// with `context` from encode_device_prompts ((2B or B), L, hidden). Returns the final latents.
Tensor denoise(const DenoiseSetup& setup, Tensor x, const Tensor& context, const StepObserver& observer);

}  // namespace octodiff
