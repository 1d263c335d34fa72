// Prediction types (no goldens exist for them): for a sample built from a known clean image x0
// and noise eps, a model predicting eps, v or x0 consistently must yield the same step and the
// same x0 estimate with every scheduler and both semantics.
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct Level {
  double alpha, sigma;  // variance-preserving: x_vp = alpha·x0 + sigma·eps
  double input_scale;   // the scheduler's sample is input_scale·x_vp (sqrt(σ²+1) for LMS/Euler)
};

// The noise level of the first step as each scheduler sees it.
Level first_level(const Scheduler& s, const SchedulerState& state) {
  const bool sigma_space =
      s.kind() == SchedulerKind::Lms || s.kind() == SchedulerKind::Euler ||
      (s.kind() == SchedulerKind::DpmSolverPP && s.semantics() == SchedulerSemantics::Diffusers);
  if (sigma_space) {
    const double sig = state.sigmas[0];
    const double alpha = 1.0 / std::sqrt(sig * sig + 1.0);
    const bool scaled_input = s.kind() != SchedulerKind::DpmSolverPP;
    return {alpha, sig * alpha, scaled_input ? 1.0 / alpha : 1.0};
  }
  const double a = s.alphas_cumprod()[static_cast<int>(state.timesteps[0])];
  return {std::sqrt(a), std::sqrt(1.0 - a), 1.0};
}

TEST(PredictionTypes, ConsistentModelsAgree) {
  const Shape shape = {1, 4, 4, 4};
  Tensor x0 = Tensor::empty(shape), eps = Tensor::empty(shape);
  for (int64_t i = 0; i < x0.numel(); ++i) {
    x0[i] = static_cast<float>(0.9 * std::sin(0.7 * i + 0.3));
    eps[i] = static_cast<float>(1.5 * std::cos(1.3 * i));
  }
  for (SchedulerKind kind : {SchedulerKind::Pndm, SchedulerKind::Ddim, SchedulerKind::Lms,
                             SchedulerKind::Euler, SchedulerKind::DpmSolverPP}) {
    for (auto semantics : {SchedulerSemantics::Diffusers, SchedulerSemantics::Flax}) {
      const std::string label =
          scheduler_name(kind) + (semantics == SchedulerSemantics::Flax ? " flax" : " torch");
      SchedulerConfig config = SchedulerConfig::from_json(tiny_sd_scheduler_json(), kind);
      auto eps_scheduler = Scheduler::create(kind, config, semantics);
      const SchedulerState state = eps_scheduler->set_timesteps(10);
      const Level l = first_level(*eps_scheduler, state);
      Tensor x = Tensor::empty(shape), v = Tensor::empty(shape);
      for (int64_t i = 0; i < x.numel(); ++i) {
        x[i] = static_cast<float>(l.input_scale * (l.alpha * x0[i] + l.sigma * eps[i]));
        v[i] = static_cast<float>(l.alpha * eps[i] - l.sigma * x0[i]);
      }
      const StepResult ref = eps_scheduler->step(state, eps, 0, x);
      if (ref.pred_original_sample.numel() > 0)
        expect_parity(label + " epsilon: x0", ref.pred_original_sample, x0);

      std::vector<std::pair<PredictionType, Tensor>> others = {{PredictionType::VPrediction, v}};
      const bool supports_sample = kind != SchedulerKind::Pndm &&
                                   !(kind == SchedulerKind::Euler && semantics == SchedulerSemantics::Flax);
      if (supports_sample) others.push_back({PredictionType::Sample, x0});
      for (const auto& [type, model_output] : others) {
        config.prediction_type = type;
        auto s = Scheduler::create(kind, config, semantics);
        const StepResult r = s->step(s->set_timesteps(10), model_output, 0, x);
        const std::string name = label + (type == PredictionType::Sample ? " sample" : " v_prediction");
        expect_parity(name + " vs epsilon: prev_sample", r.prev_sample, ref.prev_sample);
        if (r.pred_original_sample.numel() > 0) expect_parity(name + ": x0", r.pred_original_sample, x0);
      }
    }
  }
}

}  // namespace
