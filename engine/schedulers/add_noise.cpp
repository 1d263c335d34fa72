// Image-to-image support shared by every scheduler: the strength-cut schedule and add_noise
// (scheduler.h documents both; the sigma-family and DPM-Solver factors are overridden in their
// own files).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

#pragma GCC optimize("fp-contract=off")

namespace octodiff {

namespace {

void check_strength(double strength) {
  if (!(strength > 0.0 && strength <= 1.0))
    fail("strength must be in (0, 1] (the fraction of the schedule an image-to-image run denoises), got ", strength);
}

}  // namespace

SchedulerState Scheduler::set_timesteps_for_strength(int num_inference_steps, double strength) const {
  check_strength(strength);
  SchedulerState state = set_timesteps(num_inference_steps);
  // Python's int() of the float64 product, as both pipelines compute it.
  const int init_timestep = std::min(static_cast<int>(num_inference_steps * strength), num_inference_steps);
  const int t_start = std::max(num_inference_steps - init_timestep, 0);
  if (t_start >= num_model_calls(state))
    fail("strength ", strength, " with ", num_inference_steps, " steps leaves no denoising step (int(",
         num_inference_steps, " × ", strength, ") = 0); raise the strength or the steps");
  state.begin_index = state.step_index = t_start;
  return state;
}

Scheduler::NoiseScales Scheduler::add_noise_scales(const SchedulerState& state, int i) const {
  const int t = static_cast<int>(model_timestep(state, i));
  const float alpha = sched::alpha_at(alphas_cumprod_, t);
  return {std::sqrt(alpha), std::sqrt(1.0f - alpha)};
}

Tensor Scheduler::add_noise(const SchedulerState& state, const Tensor& original, const Tensor& noise, int i) const {
  sched::check_call(state, i, (scheduler_class_name(kind()) + " add_noise").c_str());
  sched::check_same_shape(original, noise, (scheduler_class_name(kind()) + " add_noise").c_str());
  const NoiseScales k = add_noise_scales(state, i);
  return sched::elementwise([k](float x, float n) { return k.sample * x + k.noise * n; }, original, noise);
}

// ---- per-class factors ----------------------------------------------------------------------

Scheduler::NoiseScales DpmSolverMultistepScheduler::add_noise_scales(const SchedulerState& state, int i) const {
  if (semantics_ == SchedulerSemantics::Flax) return Scheduler::add_noise_scales(state, i);
  // torch: alpha_t = 1 / ((sigma**2 + 1) ** 0.5), sigma_t = sigma * alpha_t, in float32.
  const float sigma = static_cast<float>(state.sigmas[i]);
  const float alpha = 1.0f / std::sqrt(sigma * sigma + 1.0f);
  return {alpha, sigma * alpha};
}

SchedulerState LcmScheduler::set_timesteps_for_strength(int num_inference_steps, double strength) const {
  check_strength(strength);
  return lcm_timesteps(num_inference_steps, strength);
}

}  // namespace octodiff
