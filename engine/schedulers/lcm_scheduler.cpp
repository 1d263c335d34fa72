// LCM (latent consistency models, diffusers' LCMScheduler, multistep consistency sampling).
//
// Timesteps: the distillation schedule holds original_inference_steps timesteps
// k·j − 1 (j = 1..original_inference_steps, k = T // original_inference_steps), e.g. 999, 979,
// …, 19 for 50; N steps take the entries at floor(linspace(0, 50, N, endpoint=False)) of it
// reversed (4 steps: 999, 759, 499, 259). diffusers' LCMScheduler has timestep_spacing and
// steps_offset options but never reads them, so neither changes the grid here.
// Step at t (next grid point t', or t itself after the last):
//   x0 from the prediction type (as DDIM), clipped when clip_sample;
//   s = t·timestep_scaling, c_skip = 0.25/(s² + 0.25), c_out = s/sqrt(s² + 0.25) (σ_data = 0.5);
//   denoised = c_out·x0 + c_skip·x;
//   every step but the last: x' = sqrt(ᾱ_t')·denoised + sqrt(1 − ᾱ_t')·z with fresh noise z;
//   the last: x' = denoised. pred_original_sample holds `denoised` (what the pipeline decodes).
// All scalars are f32, as torch's 0-dim tensors hold them.
// Flax semantics: diffusers has no Flax LCMScheduler, so the torch algorithm runs unchanged
// (torch tables; the timesteps are integers anyway); semantics() reports Diffusers.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

// Round every a·b + c as written, like torch's separate element-wise kernels.
#pragma GCC optimize("fp-contract=off")

namespace octodiff {

using sched::elementwise;

LcmScheduler::LcmScheduler(const SchedulerConfig& config, SchedulerSemantics)
    : UnscaledInputScheduler(config, SchedulerSemantics::Diffusers, "LCM") {}

SchedulerState LcmScheduler::set_timesteps(int n) const { return lcm_timesteps(n, 1.0); }

SchedulerState LcmScheduler::lcm_timesteps(int n, double strength) const {
  sched::check_num_steps(config_, n);
  const int T = config_.num_train_timesteps;
  const int original = config_.original_inference_steps;
  if (n > original)
    fail("LCMScheduler: ", n, " inference steps cannot exceed original_inference_steps (", original,
         "): the steps are a subset of the distillation schedule");
  const int k = T / original;
  // The first int(original · strength) distillation timesteps (all of them at strength 1).
  const int kept = static_cast<int>(original * strength);
  if (kept / n < 1)
    fail("LCMScheduler: original_inference_steps × strength = ", original, " × ", strength, " leaves ", kept,
         " timesteps, fewer than the ", n, " inference steps; lower the steps or raise the strength");
  std::vector<double> origin;  // descending: k·kept − 1, …, k − 1
  for (int j = kept; j >= 1; --j) origin.push_back(static_cast<double>(j * k - 1));
  // np.linspace(0, len, n, endpoint=False) = i·(len/n) in float64, then floor.
  const double step = static_cast<double>(origin.size()) / static_cast<double>(n);
  SchedulerState state;
  state.num_inference_steps = n;
  for (int i = 0; i < n; ++i)
    state.timesteps.push_back(origin[static_cast<size_t>(std::floor(static_cast<double>(i) * step))]);
  return state;
}

bool LcmScheduler::needs_noise(const SchedulerState& state, int i) const {
  sched::check_call(state, i, "LCM needs_noise");
  return i != state.num_inference_steps - 1;
}

StepResult LcmScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                              const Tensor& sample) const {
  if (needs_noise(state, i))
    fail("LCM step ", i, " adds noise (every step but the last does): call step(state, model_output, i, sample, "
         "noise)");
  return step_with_noise(state, model_output, i, sample, Tensor());
}

Tensor LcmScheduler::predict_x0(const Tensor& m, const Tensor& x, float alpha) const {
  const float sa = std::sqrt(alpha), sb = std::sqrt(1.0f - alpha);
  Tensor x0;
  switch (config_.prediction_type) {
    case PredictionType::Epsilon:
      x0 = elementwise([=](float xv, float mv) { return (xv - sb * mv) / sa; }, x, m);
      break;
    case PredictionType::Sample:
      x0 = m;
      break;
    case PredictionType::VPrediction:
      x0 = elementwise([=](float xv, float mv) { return sa * xv - sb * mv; }, x, m);
      break;
  }
  if (config_.clip_sample) {
    const float lim = static_cast<float>(config_.clip_sample_range);
    x0 = elementwise([=](float v) { return std::clamp(v, -lim, lim); }, x0);
  }
  return x0;
}

StepResult LcmScheduler::step_with_noise(const SchedulerState& state, const Tensor& model_output, int i,
                                         const Tensor& sample, const Tensor& noise) const {
  sched::check_step(state, i, "LCM step");
  sched::check_same_shape(model_output, sample, "LCM step");
  const int last = static_cast<int>(state.timesteps.size()) - 1;
  const int t = static_cast<int>(state.timesteps[i]);
  const int t_prev = i < last ? static_cast<int>(state.timesteps[i + 1]) : t;
  check_signal_left(t);
  const float alpha = sched::alpha_at(alphas_cumprod_, t);
  const float alpha_prev = alpha_or_final(t_prev);

  // Boundary conditions: torch multiplies the int64 timestep by the Python float in f32.
  const float scaled = static_cast<float>(t) * static_cast<float>(config_.timestep_scaling);
  const float sigma_data_sq = 0.25f;
  const float c_skip = sigma_data_sq / (scaled * scaled + sigma_data_sq);
  const float c_out = scaled / std::sqrt(scaled * scaled + sigma_data_sq);

  const Tensor x0 = predict_x0(model_output, sample, alpha);
  const Tensor denoised =
      elementwise([=](float p, float x) { return c_out * p + c_skip * x; }, x0, sample);
  StepResult r;
  if (needs_noise(state, i)) {
    const float a = std::sqrt(alpha_prev), b = std::sqrt(1.0f - alpha_prev);
    r.prev_sample = elementwise([=](float d, float z) { return a * d + b * z; }, denoised, noise);
  } else {
    r.prev_sample = denoised;
  }
  r.pred_original_sample = denoised;
  r.state = state;
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
