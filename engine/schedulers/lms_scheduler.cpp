// K-LMS: x_{i+1} = x_i + Σ_k c_k·d_{i−k}, d = (x − x0)/σ, with c_k the integral over
// [σ_i, σ_{i+1}] of the Lagrange basis polynomial through the last min(i+1, 4) sigmas.
//
// Diffusers semantics (torch LMSDiscreteScheduler): float timesteps per timestep_spacing
// (linspace default), sigmas interpolated in float64 (np.interp), init_noise_sigma = max σ for
// linspace/trailing and sqrt(max σ² + 1) otherwise.
// Flax semantics: FlaxLMSDiscreteScheduler cannot run inside FlaxStableDiffusionPipeline's jitted
// loop (its step indexes sigmas by the timestep value and calls a host quadrature on traced
// values; see spec/schedulers.md §7). We therefore run the torch algorithm on the grid the Flax
// class builds: f32 jnp.linspace(T−1, 0, N) (no spacing option), sigmas interpolated in f32 as
// (1 − f)·σ[floor] + f·σ[ceil], timesteps truncated to int32 — which is what the pipeline would
// feed the UNet — and init_noise_sigma = max training σ (read before set_timesteps).
#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

// Round every a·b + c as written, like torch's separate element-wise kernels and numpy's
// baseline build (GCC would otherwise fuse them into FMAs in C++ even in ISO mode); the FMAs
// the references do contain are written as std::fma.
#pragma GCC optimize("fp-contract=off")

namespace octodiff {
namespace {

using sched::elementwise;
constexpr int kLmsOrder = 4;

// ∫_{σ_i}^{σ_{i+1}} Π_{j≠k} (τ − σ_{i−j}) / (σ_{i−k} − σ_{i−j}) dτ over j < order. The
// integrand has degree ≤ 3, so 3-point Gauss-Legendre is exact (diffusers' adaptive quadrature
// agrees to rounding).
double lms_coefficient(const std::vector<double>& sigmas, int i, int order, int k) {
  const auto basis = [&](double tau) {
    double prod = 1.0;
    for (int j = 0; j < order; ++j) {
      if (j == k) continue;
      prod *= (tau - sigmas[i - j]) / (sigmas[i - k] - sigmas[i - j]);
    }
    return prod;
  };
  const double a = sigmas[i], b = sigmas[i + 1];
  const double mid = (a + b) / 2, half = (b - a) / 2;
  const double node = std::sqrt(3.0 / 5.0);
  return half * (5.0 / 9.0 * basis(mid - half * node) + 8.0 / 9.0 * basis(mid) +
                 5.0 / 9.0 * basis(mid + half * node));
}

}  // namespace

LmsDiscreteScheduler::LmsDiscreteScheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : SigmaScheduler(config, semantics) {}

// Flax reads the largest training sigma itself (no √(σ² + 1)); its grid entries are already
// int32-truncated, so the family's model_timestep (the grid's own value) serves both semantics.
double LmsDiscreteScheduler::flax_init_noise_sigma() const {
  return *std::max_element(train_sigmas_.begin(), train_sigmas_.end());
}

SchedulerState LmsDiscreteScheduler::set_timesteps(int n) const {
  sched::check_num_steps(config_, n);
  const int T = config_.num_train_timesteps;
  SchedulerState state;
  state.num_inference_steps = n;
  if (semantics_ == SchedulerSemantics::Flax) {
    for (float t : sched::jax_linspace_f32(static_cast<float>(T - 1), 0.0f, n)) {
      const int lo = static_cast<int>(std::floor(t)), hi = static_cast<int>(std::ceil(t));
      const float frac = t - std::floor(t);  // jnp.mod(t, 1.0) for t >= 0
      state.sigmas.push_back((1.0f - frac) * train_sigmas_[lo] + frac * train_sigmas_[hi]);
      state.timesteps.push_back(static_cast<double>(static_cast<int32_t>(t)));
    }
    state.sigmas.push_back(0.0);
    return state;
  }
  // Karras: torch keeps these timesteps in float64 (the UNet rounds them to float32).
  if (config_.use_karras_sigmas)
    return sched::karras_sigma_family_state(config_, train_sigmas_, n, 0.0f, /*timesteps_in_f32=*/false);
  return sched::sigma_family_state(config_, train_sigmas_, n, 0.0f);
}

StepResult LmsDiscreteScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                                      const Tensor& sample) const {
  sched::check_step(state, i, "LMS step");
  sched::check_same_shape(model_output, sample, "LMS step");
  const float sigma = static_cast<float>(state.sigmas[i]);
  const Tensor x0 = sched::sigma_family_x0(config_.prediction_type, sigma, model_output, sample);
  const Tensor derivative = elementwise([=](float x, float p) { return (x - p) / sigma; }, sample, x0);

  StepResult r;
  r.state = state;
  r.state.history.push_back(derivative);
  r.state.history_t.push_back(sigma);
  if (r.state.history.size() > kLmsOrder) {
    r.state.history.erase(r.state.history.begin());
    r.state.history_t.erase(r.state.history_t.begin());
  }
  const int order = std::min(i + 1, kLmsOrder);
  const int n = static_cast<int>(r.state.history.size());
  // A run begun at call begin_index > 0 (image-to-image) has fewer derivatives than `order`:
  // torch still forms the coefficients of that order and zip() uses the first n of them.
  if (n < std::min(order, i - state.begin_index + 1))
    fail("LMS step: the state lacks the derivatives of the previous steps");
  const int terms = std::min(order, n);
  // Coefficients are rounded to f32 where torch multiplies them into the f32 derivatives, and
  // the terms are summed newest first, as Python's sum() does.
  std::array<float, kLmsOrder> coeff{};
  for (int k = 0; k < order; ++k) coeff[k] = static_cast<float>(lms_coefficient(state.sigmas, i, order, k));
  Tensor sum = elementwise([&](float d) { return coeff[0] * d; }, r.state.history[n - 1]);
  for (int k = 1; k < terms; ++k)
    sum = elementwise([&](float s, float d) { return s + coeff[k] * d; }, sum, r.state.history[n - 1 - k]);
  r.prev_sample = elementwise([](float x, float s) { return x + s; }, sample, sum);
  r.pred_original_sample = x0;
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
