// Image-to-image support of the schedulers: set_timesteps_for_strength and add_noise, against
// diffusers' classes (goldens/img2img_add_noise.safetensors, tools/goldens/make_img2img_goldens.py)
// and, for Flax semantics (no JAX here), against the Flax pipeline's formulas computed in the test.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

const SafetensorsFile& goldens() { return golden_file("img2img_add_noise.safetensors"); }

std::unique_ptr<Scheduler> make(SchedulerKind kind, SchedulerSemantics semantics = SchedulerSemantics::Diffusers) {
  return Scheduler::create(kind, SchedulerConfig::from_json(tiny_sd_scheduler_json(), kind), semantics);
}

std::vector<double> tail(const std::vector<double>& v, int from) { return {v.begin() + from, v.end()}; }

class AddNoiseMatchesDiffusers : public ::testing::TestWithParam<SchedulerKind> {};

TEST_P(AddNoiseMatchesDiffusers, AtTheStartOfAStrengthPointSixRun) {
  const SchedulerKind kind = GetParam();
  const std::string cls = scheduler_class_name(kind);
  auto s = make(kind);
  SchedulerState state;
  if (kind == SchedulerKind::Lcm) {
    // LCM's own img2img schedule is the strength grid (tested below); here diffusers' cut grid.
    state = s->set_timesteps(10);
    state.begin_index = state.step_index = 4;
  } else {
    state = s->set_timesteps_for_strength(10, 0.6);
  }
  EXPECT_EQ(state.begin_index, 4) << cls;  // 10 − min(int(10·0.6), 10)
  EXPECT_EQ(tail(state.timesteps, state.begin_index), golden_numbers(goldens(), cls + ".timesteps")) << cls;
  const Tensor noisy =
      s->add_noise(state, goldens().to_f32("original"), goldens().to_f32("noise"), state.begin_index);
  expect_close_abs(cls + " add_noise", noisy, goldens().to_f32(cls + ".noisy"), 2e-6);
}

INSTANTIATE_TEST_SUITE_P(EveryScheduler, AddNoiseMatchesDiffusers, ::testing::ValuesIn(all_scheduler_kinds()),
                         [](const auto& info) {
                           // DPM++ 2M SDE is DPMSolverMultistepScheduler too (the same add_noise)
                           return scheduler_class_name(info.param) +
                                  (info.param == SchedulerKind::DpmSolverSde ? "Sde" : "");
                         });

TEST(AddNoise, LcmStrengthCutsTheDistillationTimestepsAsDiffusers) {
  auto s = make(SchedulerKind::Lcm);
  for (double strength : {0.5, 1.0}) {
    const std::string name = "lcm_s" + std::string(strength == 1.0 ? "1.0" : "0.5");
    const SchedulerState state = s->set_timesteps_for_strength(4, strength);
    EXPECT_EQ(state.begin_index, 0);
    EXPECT_EQ(state.timesteps, golden_numbers(goldens(), name + ".timesteps")) << name;
    expect_close_abs(name + " add_noise", s->add_noise(state, goldens().to_f32("original"), goldens().to_f32("noise"), 0),
                     goldens().to_f32(name + ".noisy"), 2e-6);
  }
  // 50 × 0.1 = 5 distillation timesteps cannot hold 8 steps: diffusers' ValueError, ours an Error.
  EXPECT_THROW(s->set_timesteps_for_strength(8, 0.1), Error);
}

TEST(AddNoise, StartStepIsTheFlaxAndTorchFormula) {
  auto s = make(SchedulerKind::Ddim);
  // t_start = N − min(int(N·strength), N), Python's int() of the float64 product.
  struct Case { int steps; double strength; int t_start; };
  for (const Case c : {Case{8, 0.75, 2}, Case{8, 0.5, 4}, Case{10, 0.3, 7}, Case{50, 0.8, 10}, Case{5, 1.0, 0},
                       Case{3, 0.99, 1}, Case{7, 0.15, 6}}) {
    const SchedulerState state = s->set_timesteps_for_strength(c.steps, c.strength);
    EXPECT_EQ(state.begin_index, c.t_start) << c.steps << " steps, strength " << c.strength;
    EXPECT_EQ(state.step_index, c.t_start);
  }
  for (double bad : {0.0, -0.2, 1.01, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_THROW(s->set_timesteps_for_strength(10, bad), Error) << bad;
  // int(10 · 0.05) = 0 steps to run: refused rather than a run that only decodes the image.
  EXPECT_THROW(s->set_timesteps_for_strength(10, 0.05), Error);
}

// The Flax pipeline: add_noise(params["scheduler"], init, noise, timesteps[start]) with
// add_noise_common: √ᾱ_t·x + √(1 − ᾱ_t)·n, ᾱ from the scaled_linear betas (computed here in
// float64 from the config, independently of the scheduler's tables).
TEST(AddNoise, FlaxDdpmFamilyFormula) {
  std::vector<double> alpha_bar(1000);
  double prod = 1;
  const double a = std::sqrt(0.00085), b = std::sqrt(0.012);
  for (int t = 0; t < 1000; ++t) {
    const double beta = std::pow(a + (b - a) * t / 999.0, 2);
    prod *= 1 - beta;
    alpha_bar[t] = prod;
  }
  for (SchedulerKind kind : {SchedulerKind::Pndm, SchedulerKind::Ddim, SchedulerKind::DpmSolverPP}) {
    auto s = make(kind, SchedulerSemantics::Flax);
    const SchedulerState state = s->set_timesteps_for_strength(8, 0.75);
    ASSERT_EQ(state.begin_index, 2);
    const int t = static_cast<int>(state.timesteps[2]);
    const Tensor x = goldens().to_f32("original"), n = goldens().to_f32("noise");
    const Tensor got = s->add_noise(state, x, n, state.begin_index);
    Tensor want = Tensor::empty(x.shape());
    for (int64_t k = 0; k < x.numel(); ++k)
      want[k] = static_cast<float>(std::sqrt(alpha_bar[t]) * x[k] + std::sqrt(1 - alpha_bar[t]) * n[k]);
    expect_close_abs(scheduler_class_name(kind) + " Flax add_noise at t=" + std::to_string(t), got, want, 1e-5);
  }
}

TEST(AddNoise, RunsBegunLateStepInOrderAndRefuseOthers) {
  for (SchedulerKind kind : all_scheduler_kinds()) {
    auto s = make(kind);
    SchedulerState state = s->set_timesteps_for_strength(8, kind == SchedulerKind::Lcm ? 1.0 : 0.5);
    Tensor x = goldens().to_f32("original");
    const Tensor eps = goldens().to_f32("noise");
    EXPECT_THROW(s->step(state, eps, state.begin_index + 1, x, eps), Error) << scheduler_name(kind);
    for (int i = state.begin_index; i < s->num_model_calls(state); ++i) {
      StepResult r = s->step(state, eps, i, x, eps);
      x = r.prev_sample;
      state = r.state;
    }
    for (float v : x) ASSERT_TRUE(std::isfinite(v)) << scheduler_name(kind);
  }
}

}  // namespace
