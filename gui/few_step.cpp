#include "few_step.h"

#include <QObject>

#include "pipeline/metadata.h"
#include "pipeline/model.h"

namespace octodiff::gui {
namespace {

bool ownSchedulerIsTrailingEuler(const StableDiffusionModel& m) {
  const SchedulerKind own = m.default_scheduler();
  if (own != SchedulerKind::Euler && own != SchedulerKind::EulerAncestral) return false;
  try {
    return m.scheduler_config(own).timestep_spacing == TimestepSpacing::Trailing;
  } catch (...) {
    return false;  // a config the pipeline will refuse anyway
  }
}

}  // namespace

SamplingValues standardSampling() {
  return {};
}

SamplingValues lcmLoraPreset() {
  return {4, 1.5, SchedulerKind::Lcm};
}

FewStepProfile recognizeFewStep(const StableDiffusionModel& m) {
  const bool own_lcm = m.default_scheduler() == SchedulerKind::Lcm;
  const std::optional<SchedulerKind> lcm = own_lcm ? std::nullopt : std::optional(SchedulerKind::Lcm);
  if (m.unet().config().time_cond_proj_dim > 0)
    return {FewStepKind::LcmDistilled, {4, 8.0, lcm}, QObject::tr("LCM-distilled UNet, guidance embedded")};
  if (own_lcm) return {FewStepKind::LcmScheduler, {4, 1.5, std::nullopt}, QObject::tr("LCM scheduler")};
  if (ownSchedulerIsTrailingEuler(m))
    return {FewStepKind::Turbo, {1, 0.0, std::nullopt}, QObject::tr("Turbo-style: Euler, trailing timesteps")};
  return {};
}

QString describeSampling(const SamplingValues& v) {
  QString text = (v.steps == 1 ? QObject::tr("1 step") : QObject::tr("%1 steps").arg(v.steps)) +
                 QObject::tr(", guidance %1").arg(v.guidance);
  if (v.scheduler) text += QStringLiteral(", ") + QString::fromStdString(sampler_display_name(*v.scheduler));
  return text;
}

SamplingAdvice adviseSampling(const FewStepProfile& profile, const SamplingValues& current,
                              const std::optional<SamplingValues>& lastAutomatic) {
  SamplingAdvice a;
  a.values = profile.values;
  const bool users_own = current != standardSampling() && (!lastAutomatic || current != *lastAutomatic);
  a.apply = !users_own && current != profile.values;
  a.remember = !users_own || current == profile.values;
  if (profile.kind == FewStepKind::None) return a;
  const QString what = describeSampling(profile.values);
  if (users_own && current != profile.values)
    a.note = QObject::tr("Few-step model (%1): %2 recommended — your settings were kept").arg(profile.description, what);
  else
    a.note = QObject::tr("Few-step model (%1): %2 — change freely").arg(profile.description, what);
  return a;
}

}  // namespace octodiff::gui
