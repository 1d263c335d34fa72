// DPM-Solver(++) multistep, orders 1-3, midpoint or heun second-order form; and its SDE form
// (algorithm_type "sde-dpmsolver++", A1111's "DPM++ 2M SDE"), orders 1-2, which adds fresh noise
// every step: x_t = (σ_t/σ_s0)·e^{−h}·x + α_t(1 − e^{−2h})·D0 [+ the D1 term] + σ_t·√(1 − e^{−2h})·z.
//
// Diffusers semantics (torch DPMSolverMultistepScheduler of diffusers 0.31): works in sigma
// space — each grid point's alpha = 1/sqrt(σ²+1), sigma = σ·alpha, all in f32 — with an appended
// final sigma (0 for final_sigmas_type "zero"). The last step is first order whenever the final
// sigma is 0 (it then returns the x0 prediction) or lower_order_final holds with N < 15; the
// last-but-one is at most second order under the same N < 15 rule.
// Flax semantics (FlaxDPMSolverMultistepScheduler): alpha/sigma/lambda come from the training
// tables at integer timesteps and the last step targets training timestep 0 (not sigma 0). The
// last step is first order only if lower_order_final and N < 15. The SDE form has no Flax class
// and always runs the Diffusers semantics (Scheduler::create sees to it).
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

DpmSolverMultistepScheduler::DpmSolverMultistepScheduler(const SchedulerConfig& config,
                                                         SchedulerSemantics semantics)
    : UnscaledInputScheduler(config, semantics, "DPM-Solver", TerminalAlpha::SigmaFloor),
      train_sigmas_(sched::training_sigmas(alphas_cumprod_)) {
  if (sde() && semantics_ == SchedulerSemantics::Flax)
    fail(
        "DPMSolverMultistepScheduler: sde-dpmsolver++ has no Flax form (Scheduler::create runs it as "
        "diffusers' torch class)");
  if (semantics_ == SchedulerSemantics::Diffusers && !data_prediction() &&
      config_.final_sigmas_type == "zero")
    fail(
        "DPMSolverMultistepScheduler: algorithm_type 'dpmsolver' cannot end at sigma 0; set "
        "final_sigmas_type to 'sigma_min'");
}

SchedulerState DpmSolverMultistepScheduler::set_timesteps(int n) const {
  sched::check_num_steps(config_, n);
  const int T = config_.num_train_timesteps;
  const bool flax = semantics_ == SchedulerSemantics::Flax;
  std::vector<double> grid;
  switch (config_.timestep_spacing) {
    case TimestepSpacing::Linspace: {
      // round(linspace(0, T − 1, N + 1)) reversed, dropping the final 0. numpy works in float64,
      // jnp in float32; the two can round a .5 differently.
      std::vector<double> points;
      if (flax) {
        for (float v : sched::jax_linspace_f32(0.0f, static_cast<float>(T - 1), n + 1)) points.push_back(v);
      } else {
        points = sched::numpy_linspace(0, T - 1, n + 1);
      }
      for (int k = n; k >= 1; --k) grid.push_back(sched::round_half_even(points[k]));
      break;
    }
    case TimestepSpacing::Leading: {
      const int ratio = T / (n + 1);
      for (int k = n; k >= 1; --k) grid.push_back(static_cast<double>(k * ratio + config_.steps_offset));
      break;
    }
    case TimestepSpacing::Trailing:
      // jnp.arange delegates concrete arguments to numpy, then holds the values as f32.
      grid = sched::trailing_grid(T, n, flax);
      break;
  }
  SchedulerState state;
  state.num_inference_steps = n;
  if (flax) {  // levels come from the training tables at the grid's timesteps: no sigmas
    state.timesteps = grid;
    return state;
  }
  if (config_.use_karras_sigmas) {
    // Karras sigmas between the training table's ends (the spacing's grid is not used), each
    // step's timestep the nearest integer to the one it reads back.
    const std::vector<float> logs = sched::log_sigmas(train_sigmas_);
    for (double sigma : sched::karras_sigmas(train_sigmas_.front(), train_sigmas_.back(), n)) {
      state.timesteps.push_back(sched::round_half_even(sched::sigma_to_timestep(sigma, logs)));
      state.sigmas.push_back(static_cast<float>(sigma));
    }
  } else {
    state.timesteps = grid;
    for (double t : grid) state.sigmas.push_back(static_cast<float>(sched::numpy_interp(t, train_sigmas_)));
  }
  state.sigmas.push_back(config_.final_sigmas_type == "sigma_min" ? train_sigmas_[0] : 0.0f);
  return state;
}

DpmSolverMultistepScheduler::Level DpmSolverMultistepScheduler::level_of_sigma(float sigma) const {
  Level l;
  l.alpha = 1.0f / std::sqrt(sigma * sigma + 1.0f);
  l.sigma = sigma * l.alpha;
  l.lambda = std::log(l.alpha) - std::log(l.sigma);  // +inf at sigma 0; the update handles it
  return l;
}

DpmSolverMultistepScheduler::Level DpmSolverMultistepScheduler::level_of_timestep(int t) const {
  const float a = sched::alpha_at(alphas_cumprod_, t);
  Level l;
  l.alpha = std::sqrt(a);
  l.sigma = std::sqrt(1.0f - a);
  l.lambda = std::log(l.alpha) - std::log(l.sigma);
  return l;
}

Tensor DpmSolverMultistepScheduler::convert_model_output(const Tensor& m, const Tensor& x,
                                                         const Level& s) const {
  const float a = s.alpha, sg = s.sigma;
  const PredictionType p = config_.prediction_type;
  if (data_prediction()) {  // x0 prediction
    if (p == PredictionType::Epsilon)
      return elementwise([=](float xv, float mv) { return (xv - sg * mv) / a; }, x, m);
    if (p == PredictionType::VPrediction)
      return elementwise([=](float xv, float mv) { return a * xv - sg * mv; }, x, m);
    return m;
  }
  // noise prediction
  if (p == PredictionType::Sample)
    return elementwise([=](float xv, float mv) { return (xv - a * mv) / sg; }, x, m);
  if (p == PredictionType::VPrediction)
    return elementwise([=](float xv, float mv) { return a * mv + sg * xv; }, x, m);
  return m;
}

Tensor DpmSolverMultistepScheduler::divided_difference(const Tensor& newer, const Tensor& older,
                                                       const Level& l_newer, const Level& l_older, float h,
                                                       float* r) {
  *r = (l_newer.lambda - l_older.lambda) / h;
  const float inv_r = 1.0f / *r;
  return elementwise([=](float a, float b) { return inv_r * (a - b); }, newer, older);
}

// outputs/levels: newest last (levels[k] belongs to outputs[k]); `order` of them are used.
Tensor DpmSolverMultistepScheduler::update(const std::vector<Tensor>& outputs,
                                           const std::vector<Level>& levels, const Level& t, int order,
                                           const Tensor& x) const {
  const size_t n = outputs.size();
  const Tensor& m0 = outputs[n - 1];
  const Level& s0 = levels[n - 1];
  const float h = t.lambda - s0.lambda;
  const bool pp = data_prediction();
  // dpmsolver++: x_t = (σ_t/σ_s0)·x − α_t(e^{−h} − 1)·D0 ...
  // dpmsolver:   x_t = (α_t/α_s0)·x − σ_t(e^{h} − 1)·D0 ...
  const float x_coeff = pp ? t.sigma / s0.sigma : t.alpha / s0.alpha;
  const float phi = pp ? std::exp(-h) - 1.0f : std::exp(h) - 1.0f;
  const float base = pp ? t.alpha : t.sigma;
  const float c0 = base * phi;
  if (order == 1) return elementwise([=](float xv, float d0) { return x_coeff * xv - c0 * d0; }, x, m0);

  const Tensor& m1 = outputs[n - 2];
  const Level& s1 = levels[n - 2];
  float r0;
  const Tensor d1_0 = divided_difference(m0, m1, s0, s1, h, &r0);
  if (order == 2) {
    float c1;  // x_t = x_coeff·x − c0·D0 − c1·D1
    if (config_.solver_type == "midpoint") {
      c1 = 0.5f * c0;
    } else {
      c1 = pp ? -(t.alpha * (phi / h + 1.0f)) : t.sigma * (phi / h - 1.0f);
    }
    return elementwise([=](float xv, float d0, float d1) { return x_coeff * xv - c0 * d0 - c1 * d1; }, x, m0,
                       d1_0);
  }

  float r1;
  const Tensor d1_1 = divided_difference(m1, outputs[n - 3], s1, levels[n - 3], h, &r1);
  const float w = r0 / (r0 + r1), inv_sum = 1.0f / (r0 + r1);
  const Tensor d1 = elementwise([=](float a, float b) { return a + w * (a - b); }, d1_0, d1_1);
  const Tensor d2 = elementwise([=](float a, float b) { return inv_sum * (a - b); }, d1_0, d1_1);
  const float c1 = pp ? t.alpha * (phi / h + 1.0f) : t.sigma * (phi / h - 1.0f);
  const float c2 = pp ? t.alpha * ((phi + h) / (h * h) - 0.5f) : t.sigma * ((phi - h) / (h * h) - 0.5f);
  if (pp) {
    return elementwise(
        [=](float xv, float v0, float v1, float v2) { return x_coeff * xv - c0 * v0 + c1 * v1 - c2 * v2; }, x,
        m0, d1, d2);
  }
  return elementwise(
      [=](float xv, float v0, float v1, float v2) { return x_coeff * xv - c0 * v0 - c1 * v1 - c2 * v2; }, x,
      m0, d1, d2);
}

// sde-dpmsolver++ (diffusers' first- and second-order updates): the ODE's D terms with e^{−2h}
// in place of e^{−h}, the sample scaled by e^{−h} more, plus σ_t·√(1 − e^{−2h}) of the noise;
// each scalar and each element-wise product rounded as torch rounds them.
Tensor DpmSolverMultistepScheduler::sde_update(const std::vector<Tensor>& outputs,
                                               const std::vector<Level>& levels, const Level& t, int order,
                                               const Tensor& x, const Tensor& noise) const {
  const size_t n = outputs.size();
  const Tensor& m0 = outputs[n - 1];
  const Level& s0 = levels[n - 1];
  const float h = t.lambda - s0.lambda;
  const float x_coeff = t.sigma / s0.sigma * std::exp(-h);
  const float e2 = std::exp(-2.0f * h);
  const float c0 = t.alpha * (1.0f - e2);
  const float cn = t.sigma * std::sqrt(1.0f - e2);
  const bool with_noise = noise.defined() && noise.numel() > 0;
  if (order == 1) {
    if (!with_noise) return elementwise([=](float xv, float d0) { return x_coeff * xv + c0 * d0; }, x, m0);
    return elementwise([=](float xv, float d0, float z) { return x_coeff * xv + c0 * d0 + cn * z; }, x, m0,
                       noise);
  }
  float r0;
  const Tensor d1 = divided_difference(m0, outputs[n - 2], s0, levels[n - 2], h, &r0);
  const float c1 =
      config_.solver_type == "midpoint" ? 0.5f * c0 : t.alpha * ((1.0f - e2) / (-2.0f * h) + 1.0f);
  if (!with_noise)
    return elementwise([=](float xv, float v0, float v1) { return x_coeff * xv + c0 * v0 + c1 * v1; }, x, m0,
                       d1);
  return elementwise(
      [=](float xv, float v0, float v1, float z) { return x_coeff * xv + c0 * v0 + c1 * v1 + cn * z; }, x, m0,
      d1, noise);
}

bool DpmSolverMultistepScheduler::needs_noise(const SchedulerState& state, int i) const {
  sched::check_call(state, i, "DPM-Solver needs_noise");
  return sde() && state.sigmas.at(static_cast<size_t>(i) + 1) != 0.0;
}

StepResult DpmSolverMultistepScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                                             const Tensor& sample) const {
  if (needs_noise(state, i))
    fail("DPM++ 2M SDE step ", i, " adds noise: call step(state, model_output, i, sample, noise)");
  return step_with_noise(state, model_output, i, sample, Tensor());
}

StepResult DpmSolverMultistepScheduler::step_with_noise(const SchedulerState& state,
                                                        const Tensor& model_output, int i,
                                                        const Tensor& sample, const Tensor& noise) const {
  sched::check_step(state, i, "DPM-Solver step");
  sched::check_same_shape(model_output, sample, "DPM-Solver step");
  const bool flax = semantics_ == SchedulerSemantics::Flax;
  const int n = static_cast<int>(state.timesteps.size());
  const int max_order = config_.solver_order;
  const bool short_run = config_.lower_order_final && n < 15;

  // Flax finds the step by looking the (integer) timestep up; the grid has no duplicates.
  int idx = i;
  if (flax) {
    idx = sched::find_timestep(state.timesteps, state.timesteps[i]);
    if (idx < 0) idx = 0;
  }
  // The noise levels of the grid points this step needs: current, previous ones, and target.
  const auto level_at = [&](int k) {
    return flax ? level_of_timestep(static_cast<int>(state.timesteps[k]))
                : level_of_sigma(static_cast<float>(state.sigmas[k]));
  };
  const Level current = level_at(idx);
  Level target;
  if (flax) {
    target = level_of_timestep(idx == n - 1 ? 0 : static_cast<int>(state.timesteps[idx + 1]));
  } else {
    target = level_of_sigma(static_cast<float>(state.sigmas[idx + 1]));
  }

  int order;
  if (flax) {
    order = max_order;
    if (state.lower_order_nums < 1 || (short_run && idx == n - 1)) {
      order = 1;
    } else if (max_order == 3 && (state.lower_order_nums < 2 || (short_run && idx == n - 2))) {
      order = 2;
    }
  } else {
    const bool final_first_order =
        idx == n - 1 && (short_run || config_.final_sigmas_type == "zero");  // euler_at_final is false
    const bool second_to_last = idx == n - 2 && short_run;
    if (max_order == 1 || state.lower_order_nums < 1 || final_first_order) {
      order = 1;
    } else if (max_order == 2 || state.lower_order_nums < 2 || second_to_last) {
      order = 2;
    } else {
      order = 3;
    }
  }
  order = std::min(order, max_order);

  const Tensor converted = convert_model_output(model_output, sample, current);
  StepResult r;
  r.state = state;
  r.state.history.push_back(converted);
  r.state.history_t.push_back(state.timesteps[idx]);
  while (static_cast<int>(r.state.history.size()) > max_order) {
    r.state.history.erase(r.state.history.begin());
    r.state.history_t.erase(r.state.history_t.begin());
  }
  if (static_cast<int>(r.state.history.size()) < order || idx + 1 < order)
    fail("DPM-Solver step: the state lacks the model outputs of the previous steps");
  // The `order` newest outputs and the grid points they were evaluated at, oldest first.
  const std::vector<Tensor> outputs(r.state.history.end() - order, r.state.history.end());
  std::vector<Level> levels;
  for (int k = order - 1; k >= 0; --k) levels.push_back(level_at(idx - k));

  r.prev_sample = sde() ? sde_update(outputs, levels, target, order, sample, noise)
                        : update(outputs, levels, target, order, sample);
  if (data_prediction()) r.pred_original_sample = converted;
  r.state.lower_order_nums = std::min(state.lower_order_nums + 1, max_order);
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
