// What the sigma family (LMS, Euler, Euler ancestral) shares: its training sigmas, the input
// scaling, add_noise's factors and the initial noise scale, in both semantics.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

#pragma GCC optimize("fp-contract=off")

namespace octodiff {

SigmaScheduler::SigmaScheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : Scheduler(config, semantics, TerminalAlpha::SigmaFloor),
      train_sigmas_(sched::training_sigmas(alphas_cumprod_)) {}

int SigmaScheduler::sigma_index(const SchedulerState&, int i) const { return i; }

double SigmaScheduler::flax_init_noise_sigma() const {
  const float max_sigma = *std::max_element(train_sigmas_.begin(), train_sigmas_.end());
  return sched::sigma_family_init_noise_sigma(max_sigma, config_.timestep_spacing);
}

double SigmaScheduler::init_noise_sigma(const SchedulerState& state) const {
  if (semantics_ == SchedulerSemantics::Flax) return flax_init_noise_sigma();
  if (state.sigmas.empty()) fail(scheduler_class_name(kind()), " init_noise_sigma: call set_timesteps() first");
  const float max_sigma = static_cast<float>(*std::max_element(state.sigmas.begin(), state.sigmas.end()));
  return sched::sigma_family_init_noise_sigma(max_sigma, config_.timestep_spacing);
}

double SigmaScheduler::model_timestep(const SchedulerState& state, int i) const {
  sched::check_call(state, i, (scheduler_class_name(kind()) + " model_timestep").c_str());
  return state.timesteps[i];
}

Tensor SigmaScheduler::scale_model_input(const SchedulerState& state, const Tensor& sample, int i) const {
  sched::check_call(state, i, (scheduler_class_name(kind()) + " scale_model_input").c_str());
  return sched::sigma_family_scale_input(sample, static_cast<float>(state.sigmas[sigma_index(state, i)]));
}

Scheduler::NoiseScales SigmaScheduler::add_noise_scales(const SchedulerState& state, int i) const {
  return {1.0f, static_cast<float>(state.sigmas[sigma_index(state, i)])};
}

}  // namespace octodiff
