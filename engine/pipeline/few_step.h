// Few-step models (LCM, SD-Turbo) recognised from their configuration, and the sampling they want
// when the user names none: the CLI's and the app's defaults come from here.
//
// Recognition, in this order:
//   - an LCM-distilled UNet (unet config time_cond_proj_dim > 0, e.g. LCM-Dreamshaper-v7, the
//     embedded demo model): the guidance is an input of the model (one pass a step): 4 steps,
//     guidance 8 (the model card's and diffusers' LCM example), LCM scheduler;
//   - the LCM scheduler as the model's own, with an ordinary UNet (an LCM-LoRA fused in): 4 steps,
//     guidance 1.5 (diffusers' LCM-LoRA guide: guidance 1–2);
//   - Euler or Euler a with timestep_spacing "trailing" and no zero terminal SNR as the model's
//     own (SD-Turbo, SDXL-Turbo): 1 step, guidance 0 (one pass, no negative prompt).
// Anything else is a standard model: 50 steps, guidance 7.5 (GenerationRequest's defaults).
// Whatever its kind, a model whose own scheduler configuration has zero terminal SNR
// (rescale_betas_zero_snr) also wants guidance rescale 0.7 (kZeroSnrGuidanceRescale), as the
// paper and diffusers' DDIMScheduler guide recommend for such models ("over-exposure" without it).
#pragma once

#include <optional>

#include "schedulers/scheduler.h"

namespace octodiff {

class StableDiffusionModel;

struct SamplingValues {
  int steps = 50;
  double guidance = 7.5;
  std::optional<SchedulerKind> scheduler;  // nullopt: the model's own
  double guidance_rescale = 0;             // GenerationRequest::guidance_rescale
  bool operator==(const SamplingValues&) const = default;
};

enum class FewStepKind { None, LcmDistilled, LcmScheduler, Turbo };

constexpr double kZeroSnrGuidanceRescale = 0.7;

struct FewStepSampling {
  FewStepKind kind = FewStepKind::None;
  SamplingValues values;  // what the model wants (the standard values for None)
};

FewStepSampling recognize_few_step(const StableDiffusionModel& model);

// "LCM-distilled UNet, guidance embedded" … ; empty for None (English; the app translates its own).
const char* few_step_description(FewStepKind kind);

}  // namespace octodiff
