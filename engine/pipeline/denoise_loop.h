// Stage 3: the denoising loop of one device — N × (UNet → guidance → scheduler step).
//
// Every pipeline of the family runs this loop; what differs between them is how a step's noise
// prediction is formed (GuidanceKind) and, for later pipelines, what is added to the model input.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "models/numerics.h"
#include "models/unet_2d_condition.h"
#include "random/jax_prng.h"
#include "schedulers/scheduler.h"

namespace octodiff {

// How one step's noise prediction comes from the UNet.
enum class GuidanceKind {
  // Classifier-free guidance: [uncond; cond] in one batch, noise = u + g·(c − u).
  ClassifierFree,
  // The prompts alone in one pass, noise = c (no negative prompt): guidance ≤ 1 (SD-Turbo-style
  // runs) in both compat modes.
  None,
  // A guidance-distilled UNet (LCM, time_cond_proj_dim > 0): the prompts alone in one pass, the
  // guidance scale given to the UNet as its timestep_cond (lcm_guidance_embedding).
  Embedded,
};

// Extra residuals for the UNet at call i — a ControlNet's (pipeline/controlnet.h) — given the
// UNet's input batch (after scale_model_input), its timestep and context. nullopt: none this call.
using ResidualProvider = std::function<std::optional<UNetResiduals>(int call, double timestep,
                                                                    const Tensor& model_input, const Tensor& context)>;

// What every device of a run shares (owned by the plan and the model).
struct DenoiseSetup {
  const UNet2DCondition* unet = nullptr;
  const Scheduler* scheduler = nullptr;
  const SchedulerState* initial_state = nullptr;
  int calls = 0;                 // the schedule's UNet calls (num_model_calls)
  // The call the run begins at: 0, or an image-to-image run's t_start (initial_state's
  // begin_index, Scheduler::set_timesteps_for_strength); calls first_call … calls − 1 run.
  int first_call = 0;
  Numerics numerics;
  GuidanceKind guidance = GuidanceKind::ClassifierFree;
  double guidance_scale = 7.5;  // as requested (CFG multiplies in float32)
  double guidance_rescale = 0;  // φ of GenerationRequest::guidance_rescale (ClassifierFree only)
  ResidualProvider residuals;   // optional, per device (its control images differ)
};

// Where a device's stochastic steps draw their noise (schedulers/scheduler.h states the rule:
// call i draws normal(fold_in(key, i), (B, C, h, w)) in NCHW order).
struct StepNoise {
  jax::Key key;  // the device's key, the one its initial latents came from
  jax::RngScheme rng = jax::RngScheme::Classic;
  // Instead, this device's rows of GenerationRequest::step_noise: (calls run, B, C, h, w), row 0
  // for the call `injected_first_call` (DenoiseSetup::first_call).
  const float* injected = nullptr;
  int injected_first_call = 0;
};

// Called after each step with the call index, its seconds and the latents (B, h, w, C) after it.
using StepObserver = std::function<void(int call, double seconds, const Tensor& latents)>;

// Per-device additions of a pipeline to the loop (all optional; pipeline/inpaint.h uses both).
struct DenoiseHooks {
  // (B, h, w, E): concatenated after the latents' channels of every UNet input (after
  // scale_model_input; with classifier-free guidance to both halves), as the inpainting
  // pipelines concatenate [latents, mask, masked-image latents].
  const Tensor* extra_input_channels = nullptr;
  // Called after each scheduler step of call i with the latents (B, h, w, C), which it may
  // change (the legacy inpainting blend); runs before the StepObserver sees them.
  std::function<void(int call, Tensor& latents)> after_step;
  // SDXL's added conditioning, rows like the context's ((2B or B)): given to every UNet call.
  const UNetTextTime* text_time = nullptr;
};

// Runs calls first_call … calls − 1 on x (B, h, w, C), the initial latents already scaled by
// init_noise_sigma (or an image-to-image run's noised image latents),
// with `context` from encode_device_prompts ((2B or B), L, hidden). Returns the final latents.
Tensor denoise(const DenoiseSetup& setup, Tensor x, const Tensor& context, const StepNoise& noise,
               const StepObserver& observer, const DenoiseHooks& hooks = {});

// The fresh noise of call i for a sample shaped like x (B, h, w, C): StepNoise's rule.
Tensor step_noise(const StepNoise& noise, int i, const Tensor& x);

}  // namespace octodiff
