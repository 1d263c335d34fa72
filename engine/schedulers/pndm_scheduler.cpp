// PNDM: Runge-Kutta warm-up (PRK) then linear multistep (PLMS); SD skips the warm-up.
//
// Diffusers semantics (torch PNDMScheduler): the pipeline runs every entry of the timestep list,
// N+1 model calls with skip_prk_steps, the last going from t = steps_offset to
// final_alpha_cumprod. A negative previous timestep selects final_alpha_cumprod.
// Flax semantics (FlaxPNDMScheduler in FlaxStableDiffusionPipeline): the same list, but the
// pipeline makes only N calls and so stops at the t = steps_offset noise level; the PLMS previous
// timestep is clamped to >= 0 (so final_alpha_cumprod is never reached by PLMS).
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

PndmScheduler::PndmScheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : UnscaledInputScheduler(config, semantics, "PNDM") {}

SchedulerState PndmScheduler::set_timesteps(int n) const {
  sched::check_num_steps(config_, n);
  const int T = config_.num_train_timesteps;
  // `ascending` is diffusers' `_timesteps`: the inference grid from low noise to high.
  const std::vector<double> grid = sched::ddim_family_grid(config_, semantics_, n);
  const std::vector<double> ascending(grid.rbegin(), grid.rend());
  const size_t m = ascending.size();
  SchedulerState state;
  state.num_inference_steps = n;
  if (config_.skip_prk_steps) {
    // reverse(_t[:-1] ++ _t[-2:-1] ++ _t[-1:]): the second-largest timestep appears twice.
    std::vector<double> plms(ascending.begin(), ascending.end() - 1);
    if (m >= 2) plms.push_back(ascending[m - 2]);
    plms.push_back(ascending[m - 1]);
    state.timesteps.assign(plms.rbegin(), plms.rend());
  } else {
    if (m < 4)
      fail("PNDM with Runge-Kutta warm-up steps (skip_prk_steps = false) needs at least 4 inference steps");
    // The last four grid points, each followed by its half step, minus the last one; every
    // entry repeated twice, minus the first and the last; reversed: 12 entries.
    const double half = static_cast<double>(T / n / 2);
    std::vector<double> prk;
    for (size_t k = m - 4; k < m; ++k) {
      prk.push_back(ascending[k]);
      prk.push_back(ascending[k] + half);
    }
    prk.pop_back();
    std::vector<double> doubled;
    for (double v : prk) doubled.insert(doubled.end(), {v, v});
    std::vector<double> trimmed(doubled.begin() + 1, doubled.end() - 1);
    state.timesteps.assign(trimmed.rbegin(), trimmed.rend());
    for (size_t k = m - 3; k-- > 0;) state.timesteps.push_back(ascending[k]);
  }
  return state;
}

int PndmScheduler::num_model_calls(const SchedulerState& state) const {
  const int listed = static_cast<int>(state.timesteps.size());
  if (semantics_ == SchedulerSemantics::Flax) return std::min(state.num_inference_steps, listed);
  return listed;
}

StepResult PndmScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                               const Tensor& sample) const {
  sched::check_step(state, i, "PNDM step");
  sched::check_same_shape(model_output, sample, "PNDM step");
  const int t = static_cast<int>(state.timesteps[i]);
  if (state.step_index - state.begin_index < num_prk_timesteps()) return step_prk(state, model_output, t, sample);
  return step_plms(state, model_output, t, sample);
}

StepResult PndmScheduler::step_prk(const SchedulerState& state, const Tensor& e, int t,
                                   const Tensor& x) const {
  const int c = state.step_index - state.begin_index;  // torch's counter, from the first call run
  const int half = config_.num_train_timesteps / state.num_inference_steps / 2;
  const int t_prev = t - (c % 2 ? 0 : half);
  // All four stages of one RK step start from the same sample and timestep.
  const int t_start = static_cast<int>(state.timesteps[state.begin_index + c / 4 * 4]);
  const float sixth = static_cast<float>(1.0 / 6.0), third = static_cast<float>(1.0 / 3.0);

  StepResult r;
  r.state = state;
  Tensor slope = e;
  switch (c % 4) {
    case 0:
      r.state.accumulator = elementwise([&](float v) { return sixth * v; }, e);
      r.state.history.push_back(e);
      if (r.state.history.size() > 4) r.state.history.erase(r.state.history.begin());
      r.state.cur_sample = x;
      break;
    case 1:
    case 2:
      r.state.accumulator =
          elementwise([&](float a, float v) { return a + third * v; }, state.accumulator, e);
      break;
    case 3:
      slope = elementwise([&](float a, float v) { return a + sixth * v; }, state.accumulator, e);
      r.state.accumulator = Tensor();
      break;
  }
  r.prev_sample = transfer(r.state.cur_sample, t_start, t_prev, slope);
  r.state.step_index = state.step_index + 1;
  return r;
}

StepResult PndmScheduler::step_plms(const SchedulerState& state, const Tensor& e, int t,
                                    const Tensor& x) const {
  const int c = state.step_index - state.begin_index;  // torch's counter, from the first call run
  const int r_step = config_.num_train_timesteps / state.num_inference_steps;
  int t_prev = t - r_step;
  if (semantics_ == SchedulerSemantics::Flax) t_prev = std::max(t_prev, 0);

  StepResult r;
  r.state = state;
  if (c != 1) {
    r.state.history.push_back(e);
    if (r.state.history.size() > 4) r.state.history.erase(r.state.history.begin());
    r.state.cur_sample = x;
  } else {
    // The repeated timestep redoes the first interval from the saved sample with the averaged
    // slope; its model output never enters the history.
    t_prev = t;
    t += r_step;
  }
  const std::vector<Tensor>& ets = r.state.history;
  const size_t n = ets.size();
  const auto at = [&](size_t back) -> const Tensor& {
    if (back > n) fail("PNDM step: not enough history for a PLMS step (was set_timesteps called?)");
    return ets[n - back];
  };
  Tensor slope;
  switch (std::min(c, 4)) {
    case 0:
      slope = e;
      break;
    case 1:
      slope = elementwise([](float a, float b) { return (a + b) / 2.0f; }, e, at(1));
      break;
    case 2:
      slope = elementwise([](float a, float b) { return (3.0f * a - b) / 2.0f; }, at(1), at(2));
      break;
    case 3:
      slope =
          elementwise([](float a, float b, float d) { return (23.0f * a - 16.0f * b + 5.0f * d) / 12.0f; },
                      at(1), at(2), at(3));
      break;
    default: {
      const float w = static_cast<float>(1.0 / 24.0);
      slope = elementwise([w](float a, float b, float d,
                              float f) { return w * (55.0f * a - 59.0f * b + 37.0f * d - 9.0f * f); },
                          at(1), at(2), at(3), at(4));
    }
  }
  r.prev_sample = transfer(r.state.cur_sample, t, t_prev, slope);
  r.state.step_index = state.step_index + 1;
  return r;
}

Tensor PndmScheduler::transfer(const Tensor& x, int t, int t_prev, const Tensor& e) const {
  if (!x.defined() || x.numel() != e.numel()) fail("PNDM step: no saved sample (steps called out of order?)");
  const float a = sched::alpha_at(alphas_cumprod_, t);
  const float a_prev = alpha_or_final(t_prev);
  const float b = 1.0f - a, b_prev = 1.0f - a_prev;
  Tensor eps = e;
  if (config_.prediction_type == PredictionType::VPrediction) {
    const float sa = std::sqrt(a), sb = std::sqrt(b);
    eps = elementwise([=](float m, float s) { return sa * m + sb * s; }, e, x);
  }
  const float sample_coeff = std::sqrt(a_prev / a);
  const float denom = a * std::sqrt(b_prev) + std::sqrt(a * b * a_prev);
  const float delta = a_prev - a;
  return elementwise([=](float s, float m) { return sample_coeff * s - delta * m / denom; }, x, eps);
}

}  // namespace octodiff
