// Euler ancestral (k-diffusion "euler_ancestral"): an Euler step down to σ_down, then fresh noise
// of standard deviation σ_up, where σ_up = sqrt(σ_to²·(σ_from² − σ_to²)/σ_from²) and
// σ_down = sqrt(σ_to² − σ_up²).
//
// Diffusers semantics (torch EulerAncestralDiscreteScheduler of diffusers 0.31): the sigma
// family's grid (scheduler_math.h: float timesteps per timestep_spacing, np.interp sigmas, final
// sigma 0), epsilon or v_prediction ("sample" is not implemented there either). diffusers draws
// noise on every step, the last included, but multiplies it by σ_up = 0 there; needs_noise() is
// false exactly where σ_up is 0, which gives the same samples.
// Flax semantics: diffusers has no Flax Euler ancestral class, so the torch algorithm above runs
// unchanged (torch tables, float timesteps); semantics() reports Diffusers.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

// Round every a·b + c as written, like torch's separate element-wise kernels.
#pragma GCC optimize("fp-contract=off")

namespace octodiff {
namespace {

struct AncestralSigmas {
  float up, down;
};

// σ_up and σ_down of step i, as torch computes them from 0-dim f32 tensors.
AncestralSigmas ancestral_sigmas(const SchedulerState& state, int i) {
  const float from = static_cast<float>(state.sigmas[i]), to = static_cast<float>(state.sigmas[i + 1]);
  AncestralSigmas s;
  s.up = std::sqrt(to * to * (from * from - to * to) / (from * from));
  s.down = std::sqrt(to * to - s.up * s.up);
  return s;
}

}  // namespace

using sched::elementwise;

EulerAncestralDiscreteScheduler::EulerAncestralDiscreteScheduler(const SchedulerConfig& config,
                                                                 SchedulerSemantics)
    : SigmaScheduler(config, SchedulerSemantics::Diffusers) {}

SchedulerState EulerAncestralDiscreteScheduler::set_timesteps(int n) const {
  return sched::sigma_family_state(config_, train_sigmas_, n, 0.0f);
}

bool EulerAncestralDiscreteScheduler::needs_noise(const SchedulerState& state, int i) const {
  sched::check_call(state, i, "Euler ancestral needs_noise");
  return ancestral_sigmas(state, i).up != 0.0f;
}

StepResult EulerAncestralDiscreteScheduler::step(const SchedulerState& state, const Tensor& model_output, int i,
                                                 const Tensor& sample) const {
  if (needs_noise(state, i))
    fail("Euler ancestral step ", i, " adds noise: call step(state, model_output, i, sample, noise)");
  return step_with_noise(state, model_output, i, sample, Tensor());
}

StepResult EulerAncestralDiscreteScheduler::step_with_noise(const SchedulerState& state, const Tensor& model_output,
                                                            int i, const Tensor& sample, const Tensor& noise) const {
  sched::check_step(state, i, "Euler ancestral step");
  sched::check_same_shape(model_output, sample, "Euler ancestral step");
  const float sigma = static_cast<float>(state.sigmas[i]);
  const AncestralSigmas s = ancestral_sigmas(state, i);
  const float dt = s.down - sigma;
  StepResult r;
  r.pred_original_sample = sched::sigma_family_x0(config_.prediction_type, sigma, model_output, sample);
  r.prev_sample =
      elementwise([=](float x, float p) { return x + (x - p) / sigma * dt; }, sample, r.pred_original_sample);
  if (s.up != 0.0f) {
    const float up = s.up;
    r.prev_sample = elementwise([=](float x, float z) { return x + z * up; }, r.prev_sample, noise);
  }
  r.state = state;
  r.state.step_index = i + 1;
  return r;
}

}  // namespace octodiff
