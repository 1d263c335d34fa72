// Diffusers semantics against the full-loop numbers of diffusers' own torch scheduler tests
// (tests/schedulers/test_scheduler_*.py at v0.31.0): they cover what the tiny-sd goldens do
// not — the PNDM Runge-Kutta warm-up, v_prediction, DDIM clipping, DPM-Solver with
// final_sigmas_type "sigma_min" and lower_order_final false, num_train_timesteps 1100.
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

SchedulerConfig test_config(SchedulerKind kind, int num_train = 1000) {
  SchedulerConfig c = SchedulerConfig::defaults(kind);
  c.num_train_timesteps = num_train;
  c.beta_start = 0.0001;
  c.beta_end = 0.02;
  c.beta_schedule = "linear";
  return c;
}

enum class Loop {
  Plain,                // x = step(model(x, t), t, x)
  ScaledSampleReplaced  // LMS/Euler tests: x = scale(x·init_sigma...); the scaled x is stepped
};

// The tests' loop with dummy model m(x, t) = x·t/(t + 1) in f32, over every timestep.
Tensor full_loop(SchedulerKind kind, const SchedulerConfig& config, Loop loop) {
  auto s = Scheduler::create(kind, config, SchedulerSemantics::Diffusers);
  SchedulerState state = s->set_timesteps(10);
  Tensor x = deterministic_sample();
  if (loop == Loop::ScaledSampleReplaced) {
    const float sigma = static_cast<float>(s->init_noise_sigma(state));
    for (float& v : x) v *= sigma;
  }
  for (int i = 0; i < s->num_model_calls(state); ++i) {
    const float t = static_cast<float>(s->model_timestep(state, i));
    if (loop == Loop::ScaledSampleReplaced) x = s->scale_model_input(state, x, i);
    Tensor m = Tensor::empty(x.shape());
    for (int64_t k = 0; k < x.numel(); ++k) m[k] = x[k] * t / (t + 1.0f);
    StepResult r = s->step(state, m, i, x);
    x = r.prev_sample;
    state = std::move(r.state);
  }
  return x;
}

void expect_sum_mean(const std::string& label, const Tensor& x, double sum, double mean) {
  test::expect_sum_mean("torch-vector", label, x, sum, mean);
}

TEST(TorchVectors, PndmRungeKuttaThenPlms) {
  SchedulerConfig c = test_config(SchedulerKind::Pndm);
  ASSERT_FALSE(c.skip_prk_steps);
  expect_sum_mean("PNDM defaults", full_loop(SchedulerKind::Pndm, c, Loop::Plain), 198.1318, 0.2580);
  SchedulerConfig v = c;
  v.prediction_type = PredictionType::VPrediction;
  expect_sum_mean("PNDM v_prediction", full_loop(SchedulerKind::Pndm, v, Loop::Plain), 67.3986, 0.0878);
  SchedulerConfig one = c;
  one.beta_start = 0.01;
  one.set_alpha_to_one = true;  // torch reaches final_alpha_cumprod = 1 on the last PLMS step
  expect_sum_mean("PNDM beta_start 0.01 set_alpha_to_one", full_loop(SchedulerKind::Pndm, one, Loop::Plain),
                  230.0399, 0.2995);
  one.set_alpha_to_one = false;
  expect_sum_mean("PNDM beta_start 0.01 !set_alpha_to_one", full_loop(SchedulerKind::Pndm, one, Loop::Plain),
                  186.9482, 0.2434);
}

TEST(TorchVectors, DdimWithClipping) {
  SchedulerConfig c = test_config(SchedulerKind::Ddim);
  ASSERT_TRUE(c.clip_sample);
  expect_sum_mean("DDIM clip_sample", full_loop(SchedulerKind::Ddim, c, Loop::Plain), 172.0067, 0.223967);
  SchedulerConfig v = c;
  v.prediction_type = PredictionType::VPrediction;
  expect_sum_mean("DDIM v_prediction", full_loop(SchedulerKind::Ddim, v, Loop::Plain), 52.5302, 0.0684);
  SchedulerConfig one = c;
  one.beta_start = 0.01;
  one.set_alpha_to_one = true;
  expect_sum_mean("DDIM beta_start 0.01 set_alpha_to_one", full_loop(SchedulerKind::Ddim, one, Loop::Plain),
                  149.8295, 0.1951);
  one.set_alpha_to_one = false;
  expect_sum_mean("DDIM beta_start 0.01 !set_alpha_to_one", full_loop(SchedulerKind::Ddim, one, Loop::Plain),
                  149.0784, 0.1941);
}

TEST(TorchVectors, LmsWith1100TrainingSteps) {
  SchedulerConfig c = test_config(SchedulerKind::Lms, 1100);
  expect_sum_mean("LMS T=1100", full_loop(SchedulerKind::Lms, c, Loop::ScaledSampleReplaced), 1006.388, 1.31);
  c.prediction_type = PredictionType::VPrediction;
  expect_sum_mean("LMS T=1100 v_prediction", full_loop(SchedulerKind::Lms, c, Loop::ScaledSampleReplaced),
                  0.0017, 2.2676e-06);
}

TEST(TorchVectors, EulerWith1100TrainingSteps) {
  SchedulerConfig c = test_config(SchedulerKind::Euler, 1100);
  expect_sum_mean("Euler T=1100", full_loop(SchedulerKind::Euler, c, Loop::ScaledSampleReplaced), 10.0807,
                  0.0131);
  c.prediction_type = PredictionType::VPrediction;
  expect_sum_mean("Euler T=1100 v_prediction", full_loop(SchedulerKind::Euler, c, Loop::ScaledSampleReplaced),
                  0.0002, 2.2676e-06);
}

TEST(TorchVectors, DpmSolverSigmaMinNoLowerOrderFinal) {
  SchedulerConfig c = test_config(SchedulerKind::DpmSolverPP);
  c.lower_order_final = false;
  c.final_sigmas_type = "sigma_min";
  // The torch test checks the mean only.
  expect_sum_mean("DPM++ 2M sigma_min", full_loop(SchedulerKind::DpmSolverPP, c, Loop::Plain), NAN, 0.3301);
  c.prediction_type = PredictionType::VPrediction;
  expect_sum_mean("DPM++ 2M sigma_min v_prediction", full_loop(SchedulerKind::DpmSolverPP, c, Loop::Plain),
                  NAN, 0.2251);
}

}  // namespace
