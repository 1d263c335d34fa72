// Euler: x_{i+1} = x_i + d·(σ_{i+1} − σ_i), d = (x − x0)/σ_i.
//
// Diffusers semantics (torch EulerDiscreteScheduler, s_churn = 0): float timesteps per
// timestep_spacing, sigmas interpolated with np.interp, final sigma 0 (or the smallest training
// sigma with final_sigmas_type = "sigma_min"); the step index is the call index.
// Flax semantics (FlaxEulerDiscreteScheduler as FlaxStableDiffusionPipeline would drive it):
// f32 jnp.linspace grid ("linspace") or reverse(arange(N)·(T//N)) + 1 ("leading"; the +1 is
// hard-coded there), sigmas by f32 jnp.interp plus a final 0. The pipeline truncates each
// timestep to int32 and both scale_model_input and step look that integer up in the float grid;
// when it is not found the lookup silently yields index 0. With "linspace" only the first and
// last grid points are integers, so every other step re-uses sigma_0 and the first interval —
// Euler-linspace is broken in the Flax pipeline, and we reproduce that on purpose.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

// Round every a·b + c as written, like torch's separate element-wise kernels and numpy's
// baseline build (GCC would otherwise fuse them into FMAs in C++ even in ISO mode); the FMAs
// the references do contain are written as std::fma.
#pragma GCC optimize("fp-contract=off")

namespace octodiff {

using sched::elementwise;

EulerDiscreteScheduler::EulerDiscreteScheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : SigmaScheduler(config, semantics) {
  if (semantics_ == SchedulerSemantics::Flax) {
    if (config_.prediction_type == PredictionType::Sample)
      fail(
          "EulerDiscreteScheduler (Flax): prediction_type 'sample' is not supported (use epsilon or "
          "v_prediction)");
  }
}

SchedulerState EulerDiscreteScheduler::set_timesteps(int n) const {
  sched::check_num_steps(config_, n);
  const int T = config_.num_train_timesteps;
  SchedulerState state;
  state.num_inference_steps = n;
  if (semantics_ == SchedulerSemantics::Flax) {
    std::vector<float> grid;
    if (config_.timestep_spacing == TimestepSpacing::Linspace) {
      grid = sched::jax_linspace_f32(static_cast<float>(T - 1), 0.0f, n);
    } else if (config_.timestep_spacing == TimestepSpacing::Trailing) {
      // FlaxEulerDiscreteScheduler has no trailing spacing, and SD-Turbo-style models ask for it:
      // Octodiff takes the torch class's trailing timesteps (held in f32 as jnp would) and keeps
      // the Flax sigma interpolation and step.
      for (double t : sched::trailing_grid(T, n, /*round_in_f32=*/true)) grid.push_back(static_cast<float>(t));
    } else {
      for (double t : sched::leading_grid(T, n, 0)) grid.push_back(static_cast<float>(t) + 1.0f);
    }
    for (float t : grid) {
      state.timesteps.push_back(t);
      state.sigmas.push_back(sched::jax_interp(t, train_sigmas_));
    }
    state.sigmas.push_back(0.0);
    return state;
  }
  const float final_sigma = config_.final_sigmas_type == "sigma_min" ? train_sigmas_[0] : 0.0f;
  if (config_.use_karras_sigmas)
    return sched::karras_sigma_family_state(config_, train_sigmas_, n, final_sigma,
                                            /*timesteps_in_f32=*/true);
  return sched::sigma_family_state(config_, train_sigmas_, n, final_sigma);
}

double EulerDiscreteScheduler::model_timestep(const SchedulerState& state, int i) const {
  sched::check_call(state, i, "Euler model_timestep");
  if (semantics_ == SchedulerSemantics::Flax) return std::trunc(state.timesteps[i]);  // int32 cast
  return SigmaScheduler::model_timestep(state, i);
}

int EulerDiscreteScheduler::sigma_index(const SchedulerState& state, int i) const {
  if (semantics_ == SchedulerSemantics::Diffusers) return i;
  // jnp.where(timesteps == t, size=1) fills with 0 when nothing matches.
  const int found = sched::find_timestep(state.timesteps, std::trunc(state.timesteps[i]));
  return found < 0 ? 0 : found;
}

StepResult EulerDiscreteScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                                        const Tensor& sample) const {
  sched::check_step(state, i, "Euler step");
  sched::check_same_shape(model_output, sample, "Euler step");
  const int idx = sigma_index(state, i);
  const float sigma = static_cast<float>(state.sigmas[idx]);
  // torch's sigma_hat = sigma·(gamma + 1) equals sigma with s_churn = 0.
  const Tensor x0 = sched::sigma_family_x0(config_.prediction_type, sigma, model_output, sample);
  const float dt = static_cast<float>(state.sigmas[idx + 1]) - sigma;
  StepResult r;
  r.prev_sample = elementwise([=](float x, float p) { return x + (x - p) / sigma * dt; }, sample, x0);
  r.pred_original_sample = x0;
  r.state = state;
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
