// What PNDM, DDIM, LCM and DPM-Solver share: the sample goes to the UNet unscaled, the initial
// noise scale is 1 and the model timestep is the grid's entry.
#include <string>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

namespace octodiff {

UnscaledInputScheduler::UnscaledInputScheduler(const SchedulerConfig& config, SchedulerSemantics semantics,
                                               const char* name, TerminalAlpha terminal)
    : Scheduler(config, semantics, terminal), name_(name) {}

double UnscaledInputScheduler::init_noise_sigma(const SchedulerState&) const {
  return 1.0;
}

double UnscaledInputScheduler::model_timestep(const SchedulerState& state, int i) const {
  sched::check_call(state, i, (std::string(name_) + " model_timestep").c_str());
  return state.timesteps[i];
}

Tensor UnscaledInputScheduler::scale_model_input(const SchedulerState& state, const Tensor& sample,
                                                 int i) const {
  sched::check_call(state, i, (std::string(name_) + " scale_model_input").c_str());
  return sample;
}

float UnscaledInputScheduler::alpha_or_final(int t) const {
  if (t >= 0) return sched::alpha_at(alphas_cumprod_, t);
  return config_.set_alpha_to_one ? 1.0f : alphas_cumprod_[0];
}

void UnscaledInputScheduler::check_signal_left(int t) const {
  if (config_.prediction_type == PredictionType::Epsilon && sched::alpha_at(alphas_cumprod_, t) == 0.0f)
    fail(name_, ": timestep ", t,
         " has no signal left (rescale_betas_zero_snr) and an epsilon-predicting model cannot be followed "
         "from it; zero-SNR models predict v (prediction_type v_prediction), or use leading spacing");
}

}  // namespace octodiff
