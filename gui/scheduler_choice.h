// The scheduler box's choice as one int: the box's item data and the stored form's
// "form/scheduler". -1: the model's own scheduler (its configuration decides Karras sigmas too);
// a SchedulerKind's number: that scheduler, Karras sigmas off where it has them ("DPM++ 2M");
// kKarrasChoice | kind: that scheduler with Karras sigmas ("DPM++ 2M Karras", as A1111 lists it).
#pragma once

#include "pipeline/generation.h"

namespace octodiff::gui {

constexpr int kModelsOwnSchedulerChoice = -1;
constexpr int kKarrasChoice = 0x100;

inline int schedulerChoice(const GenerationRequest& r) {
  if (!r.scheduler) return kModelsOwnSchedulerChoice;
  const bool karras = r.karras_sigmas.value_or(false) && supports_karras_sigmas(*r.scheduler);
  return static_cast<int>(*r.scheduler) | (karras ? kKarrasChoice : 0);
}

// Sets r->scheduler and r->karras_sigmas from a choice; an unknown number (a stored form from
// another version) means the model's own.
inline void applySchedulerChoice(int choice, GenerationRequest* r) {
  r->scheduler.reset();
  r->karras_sigmas.reset();
  const int kind = choice & ~kKarrasChoice;
  if (choice < 0 || kind >= static_cast<int>(all_scheduler_kinds().size())) return;
  r->scheduler = static_cast<SchedulerKind>(kind);
  if (supports_karras_sigmas(*r->scheduler)) r->karras_sigmas = (choice & kKarrasChoice) != 0;
}

}  // namespace octodiff::gui
