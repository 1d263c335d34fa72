// DDIM with eta = 0: x_prev = sqrt(a')·x0 + sqrt(1 − a')·eps.
//
// Diffusers semantics (torch DDIMScheduler): timestep_spacing leading/linspace/trailing.
// Flax semantics (FlaxDDIMScheduler): always "leading". Both step to t − T//N, using
// final_alpha_cumprod below t = 0, and clip x0 when clip_sample is set. Neither adds noise.
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

DdimScheduler::DdimScheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : UnscaledInputScheduler(config, semantics, "DDIM") {}

SchedulerState DdimScheduler::set_timesteps(int n) const {
  sched::check_num_steps(config_, n);
  SchedulerState state;
  state.num_inference_steps = n;
  state.timesteps = sched::ddim_family_grid(config_, semantics_, n);
  return state;
}

StepResult DdimScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                               const Tensor& sample) const {
  sched::check_step(state, i, "DDIM step");
  sched::check_same_shape(model_output, sample, "DDIM step");
  const int T = config_.num_train_timesteps;
  const int t = static_cast<int>(state.timesteps[i]);
  const int t_prev = t - T / state.num_inference_steps;
  check_signal_left(t);
  const float a = sched::alpha_at(alphas_cumprod_, t);
  const float a_prev = alpha_or_final(t_prev);
  const float b = 1.0f - a;
  const float sa = std::sqrt(a), sb = std::sqrt(b);

  Tensor x0, eps;
  switch (config_.prediction_type) {
    case PredictionType::Epsilon:
      x0 = elementwise([=](float x, float m) { return (x - sb * m) / sa; }, sample, model_output);
      eps = model_output;
      break;
    case PredictionType::Sample:
      x0 = model_output;
      eps = elementwise([=](float x, float p) { return (x - sa * p) / sb; }, sample, x0);
      break;
    case PredictionType::VPrediction:
      x0 = elementwise([=](float x, float m) { return sa * x - sb * m; }, sample, model_output);
      eps = elementwise([=](float x, float m) { return sa * m + sb * x; }, sample, model_output);
      break;
  }
  if (config_.clip_sample) {
    const float lim = static_cast<float>(config_.clip_sample_range);
    x0 = elementwise([=](float v) { return std::clamp(v, -lim, lim); }, x0);
  }
  // eta = 0: the variance term vanishes, so the direction coefficient is sqrt(1 − a').
  const float std_dev = 0.0f;
  const float dir_coeff = std::sqrt(1.0f - a_prev - std_dev * std_dev);
  const float x0_coeff = std::sqrt(a_prev);

  StepResult r;
  r.prev_sample = elementwise([=](float p, float e) { return x0_coeff * p + dir_coeff * e; }, x0, eps);
  r.pred_original_sample = x0;
  r.state = state;
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
