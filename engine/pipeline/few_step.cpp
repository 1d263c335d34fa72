#include "pipeline/few_step.h"

#include "pipeline/model.h"

namespace octodiff {
namespace {

// (Zero-SNR models are configured with trailing Euler too, and are not few-step.)
bool own_scheduler_is_trailing_euler(const StableDiffusionModel& m) {
  const SchedulerKind own = m.default_scheduler();
  if (own != SchedulerKind::Euler && own != SchedulerKind::EulerAncestral) return false;
  try {
    const SchedulerConfig c = m.scheduler_config(own);
    return c.timestep_spacing == TimestepSpacing::Trailing && !c.rescale_betas_zero_snr;
  } catch (...) {
    return false;  // a config the pipeline will refuse anyway
  }
}

FewStepSampling few_step_kind(const StableDiffusionModel& m) {
  const bool own_lcm = m.default_scheduler() == SchedulerKind::Lcm;
  const std::optional<SchedulerKind> lcm = own_lcm ? std::nullopt : std::optional(SchedulerKind::Lcm);
  if (m.unet().config().time_cond_proj_dim > 0) return {FewStepKind::LcmDistilled, {4, 8.0, lcm}};
  if (own_lcm) return {FewStepKind::LcmScheduler, {4, 1.5, std::nullopt}};
  if (own_scheduler_is_trailing_euler(m)) return {FewStepKind::Turbo, {1, 0.0, std::nullopt}};
  return {};
}

}  // namespace

FewStepSampling recognize_few_step(const StableDiffusionModel& m) {
  FewStepSampling p = few_step_kind(m);
  if (m.default_scheduler_has_zero_snr()) p.values.guidance_rescale = kZeroSnrGuidanceRescale;
  return p;
}

const char* few_step_description(FewStepKind kind) {
  switch (kind) {
    case FewStepKind::LcmDistilled: return "LCM-distilled UNet, guidance embedded";
    case FewStepKind::LcmScheduler: return "LCM scheduler";
    case FewStepKind::Turbo: return "Turbo-style: Euler, trailing timesteps";
    case FewStepKind::None: break;
  }
  return "";
}

}  // namespace octodiff
