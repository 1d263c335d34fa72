// Few-step models (LCM, SD-Turbo) and zero terminal SNR models: recognising them from their
// configuration, the steps, guidance (and guidance rescale) they want, and when the app may set
// those values for the user.
//
// Recognition and the values: engine/pipeline/few_step.h (the CLI's defaults come from there too).
//
// When the app sets them (adviseSampling): a heuristic, since the form cannot tell who typed a
// value. Steps, guidance, scheduler and CFG rescale are taken as *not the user's own* when they equal what
// the app itself set automatically last time (remembered across sessions) or the standard defaults; then a
// newly loaded model's values replace them (also back to the standard ones when a standard model follows a
// few-step one). Any other values were chosen by the user (typed, restored from a PNG, the few-step preset,
// or edited while the model loaded) and are kept; the note then says what the model recommends.
#pragma once

#include <QString>
#include <optional>

#include "pipeline/few_step.h"

namespace octodiff::gui {

using octodiff::FewStepKind;
using octodiff::SamplingValues;

struct FewStepProfile {
  FewStepKind kind = FewStepKind::None;
  SamplingValues values;  // what the model wants (the standard values for None)
  QString description;    // e.g. "LCM-distilled UNet, guidance embedded"; empty for None
};

FewStepProfile recognizeFewStep(const StableDiffusionModel& model);
SamplingValues standardSampling();
// The "Few-step preset" for any model with an LCM-LoRA: LCM scheduler, 4 steps, guidance 1.5.
SamplingValues lcmLoraPreset();

struct SamplingAdvice {
  bool apply = false;     // set `values` in the form
  bool remember = false;  // the form holds (after apply) values the app set: remember them as such
  SamplingValues values;  // the model's values
  QString note;           // for the few-step note; empty for a standard model
};
SamplingAdvice adviseSampling(const FewStepProfile& profile, const SamplingValues& current,
                              const std::optional<SamplingValues>& lastAutomatic);

// "4 steps, guidance 8" (with ", LCM" when the scheduler is explicit, ", CFG rescale 0.7" when set).
QString describeSampling(const SamplingValues& values);

}  // namespace octodiff::gui
