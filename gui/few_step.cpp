#include "few_step.h"

#include <QObject>

#include "pipeline/metadata.h"
#include "pipeline/model.h"

namespace octodiff::gui {

SamplingValues standardSampling() {
  return {};
}

SamplingValues lcmLoraPreset() {
  return {4, 1.5, SchedulerKind::Lcm};
}

FewStepProfile recognizeFewStep(const StableDiffusionModel& m) {
  const octodiff::FewStepSampling p = octodiff::recognize_few_step(m);
  QString description;
  switch (p.kind) {
    case FewStepKind::LcmDistilled: description = QObject::tr("LCM-distilled UNet, guidance embedded"); break;
    case FewStepKind::LcmScheduler: description = QObject::tr("LCM scheduler"); break;
    case FewStepKind::Turbo: description = QObject::tr("Turbo-style: Euler, trailing timesteps"); break;
    case FewStepKind::None: break;
  }
  return {p.kind, p.values, description};
}

QString describeSampling(const SamplingValues& v) {
  QString text = (v.steps == 1 ? QObject::tr("1 step") : QObject::tr("%1 steps").arg(v.steps)) +
                 QObject::tr(", guidance %1").arg(v.guidance);
  if (v.scheduler) text += QStringLiteral(", ") + QString::fromStdString(sampler_display_name(*v.scheduler));
  if (v.guidance_rescale > 0) text += QObject::tr(", CFG rescale %1").arg(v.guidance_rescale);
  return text;
}

SamplingAdvice adviseSampling(const FewStepProfile& profile, const SamplingValues& current,
                              const std::optional<SamplingValues>& lastAutomatic) {
  SamplingAdvice a;
  a.values = profile.values;
  const bool users_own = current != standardSampling() && (!lastAutomatic || current != *lastAutomatic);
  a.apply = !users_own && current != profile.values;
  a.remember = !users_own || current == profile.values;
  const bool zero_snr = profile.values.guidance_rescale > 0;
  if (profile.kind == FewStepKind::None && !zero_snr) return a;
  const QString model = profile.kind == FewStepKind::None
                            ? QObject::tr("Zero terminal SNR model")
                            : QObject::tr("Few-step model (%1)").arg(profile.description);
  const QString what = describeSampling(profile.values);
  if (users_own && current != profile.values)
    a.note = QObject::tr("%1: %2 recommended — your settings were kept").arg(model, what);
  else
    a.note = QObject::tr("%1: %2 — change freely").arg(model, what);
  return a;
}

}  // namespace octodiff::gui
