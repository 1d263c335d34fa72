#include "pipeline/few_step.h"

#include "pipeline/model.h"

namespace octodiff {
namespace {

bool own_scheduler_is_trailing_euler(const StableDiffusionModel& m) {
  const SchedulerKind own = m.default_scheduler();
  if (own != SchedulerKind::Euler && own != SchedulerKind::EulerAncestral) return false;
  try {
    return m.scheduler_config(own).timestep_spacing == TimestepSpacing::Trailing;
  } catch (...) {
    return false;  // a config the pipeline will refuse anyway
  }
}

}  // namespace

FewStepSampling recognize_few_step(const StableDiffusionModel& m) {
  const bool own_lcm = m.default_scheduler() == SchedulerKind::Lcm;
  const std::optional<SchedulerKind> lcm = own_lcm ? std::nullopt : std::optional(SchedulerKind::Lcm);
  if (m.unet().config().time_cond_proj_dim > 0) return {FewStepKind::LcmDistilled, {4, 8.0, lcm}};
  if (own_lcm) return {FewStepKind::LcmScheduler, {4, 1.5, std::nullopt}};
  if (own_scheduler_is_trailing_euler(m)) return {FewStepKind::Turbo, {1, 0.0, std::nullopt}};
  return {};
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
