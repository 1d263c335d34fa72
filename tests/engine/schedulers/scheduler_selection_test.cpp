// The schedulers of issue #20 outside the goldens: names and diffusers class names, the
// scheduler_config.json keys LCM reads, the noise contract of stochastic steps, and the errors a
// user can run into (unknown names, unsupported options, missing or misshapen noise).
#include <cmath>
#include <functional>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

std::unique_ptr<Scheduler> tiny(SchedulerKind kind, SchedulerSemantics sem = SchedulerSemantics::Diffusers) {
  return Scheduler::create(kind, SchedulerConfig::from_json(tiny_sd_scheduler_json(), kind), sem);
}

TEST(SchedulerSelection, NamesAndClassNamesOfEveryKind) {
  EXPECT_EQ(all_scheduler_kinds().size(), 8u);
  for (SchedulerKind k : all_scheduler_kinds()) {
    EXPECT_EQ(parse_scheduler_kind(scheduler_name(k)), k);
    // DPM++ 2M SDE shares DPM++ 2M's class; its config's algorithm_type tells them apart.
    EXPECT_EQ(scheduler_kind_from_class_name(scheduler_class_name(k)),
              k == SchedulerKind::DpmSolverSde ? SchedulerKind::DpmSolverPP : k);
    EXPECT_EQ(tiny(k)->kind(), k);
  }
  for (const char* n : {"dpm++-sde", "DPMPP2M-SDE", "dpm++-2m-sde"})
    EXPECT_EQ(parse_scheduler_kind(n), SchedulerKind::DpmSolverSde) << n;
  EXPECT_EQ(scheduler_name(SchedulerKind::DpmSolverSde), "dpm++-sde");
  for (const char* n : {"euler-a", "euler_a", "euler-ancestral", "Euler_Ancestral", "EULER-A"})
    EXPECT_EQ(parse_scheduler_kind(n), SchedulerKind::EulerAncestral) << n;
  EXPECT_EQ(parse_scheduler_kind("LCM"), SchedulerKind::Lcm);
  EXPECT_EQ(scheduler_name(SchedulerKind::EulerAncestral), "euler-a");
  EXPECT_EQ(scheduler_class_name(SchedulerKind::EulerAncestral), "EulerAncestralDiscreteScheduler");
  EXPECT_EQ(scheduler_class_name(SchedulerKind::Lcm), "LCMScheduler");
  EXPECT_EQ(scheduler_kind_from_class_name("EulerDiscreteScheduler"), SchedulerKind::Euler);
  EXPECT_EQ(scheduler_kind_from_class_name("KDPM2DiscreteScheduler"), std::nullopt);
  EXPECT_EQ(scheduler_kind_from_class_name("eulerdiscretescheduler"), std::nullopt);  // exact, as diffusers
  expect_error_mentioning([] { parse_scheduler_kind("euler-b"); },
                          "valid: pndm, ddim, lms, dpm++, euler, euler-a, lcm, dpm++-sde");
}

TEST(SchedulerSelection, TimestepSpacingNames) {
  for (TimestepSpacing s : {TimestepSpacing::Leading, TimestepSpacing::Linspace, TimestepSpacing::Trailing})
    EXPECT_EQ(parse_timestep_spacing(timestep_spacing_name(s)), s);
  expect_error_mentioning([] { parse_timestep_spacing("uniform"); },
                          "unknown timestep spacing 'uniform' (valid: leading, linspace, trailing)");
  expect_error_mentioning([] { parse_timestep_spacing(""); }, "valid: leading, linspace, trailing");
}

TEST(SchedulerSelection, ConfigClassName) {
  EXPECT_EQ(scheduler_config_class_name(tiny_sd_scheduler_json()), "PNDMScheduler");
  EXPECT_EQ(scheduler_config_class_name(R"({"beta_start": 0.001})"), std::nullopt);
  expect_error_mentioning([] { scheduler_config_class_name(R"({"_class_name": 3})"); },
                          "'_class_name' must be a string");
  expect_error_mentioning([] { scheduler_config_class_name("[1, 2]"); }, "must be a JSON object");
  expect_error_mentioning([] { scheduler_config_class_name("{\"_class_name\": "); }, "not valid JSON");
}

TEST(SchedulerSelection, LcmConfigKeys) {
  const SchedulerConfig d = SchedulerConfig::defaults(SchedulerKind::Lcm);
  EXPECT_EQ(d.beta_schedule, "scaled_linear");
  EXPECT_EQ(d.beta_start, 0.00085);
  EXPECT_EQ(d.beta_end, 0.012);
  EXPECT_TRUE(d.set_alpha_to_one);
  EXPECT_EQ(d.original_inference_steps, 50);
  EXPECT_EQ(d.timestep_scaling, 10.0);
  EXPECT_EQ(d.timestep_spacing, TimestepSpacing::Leading);
  // The LCM-Dreamshaper-v7 scheduler_config.json (its keys that matter).
  const SchedulerConfig c = SchedulerConfig::from_json(R"({"_class_name": "LCMScheduler",
      "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": false,
      "num_train_timesteps": 1000, "original_inference_steps": 25, "prediction_type": "epsilon",
      "set_alpha_to_one": true, "steps_offset": 1, "timestep_scaling": 5.0, "timestep_spacing": "leading",
      "thresholding": false, "rescale_betas_zero_snr": false, "trained_betas": null})",
                                                       SchedulerKind::Lcm);
  EXPECT_EQ(c.original_inference_steps, 25);
  EXPECT_EQ(c.timestep_scaling, 5.0);
  // 25 original steps: k = 40, timesteps 999, 959, ..., 39; 4 steps take indices 0, 6, 12, 18.
  EXPECT_EQ(Scheduler::create(SchedulerKind::Lcm, c, SchedulerSemantics::Diffusers)->set_timesteps(4).timesteps,
            (std::vector<double>{999, 759, 519, 279}));
}

TEST(SchedulerSelection, LcmBoundaryConditionsUseTimestepScaling) {
  // With prediction_type "sample" the step is c_out·m + c_skip·x; on the last step (no noise)
  // x = 0 leaves c_out·m. One step at t = 999: s = 999·scaling.
  for (double scaling : {10.0, 0.01}) {
    SchedulerConfig c = SchedulerConfig::defaults(SchedulerKind::Lcm);
    c.prediction_type = PredictionType::Sample;
    c.timestep_scaling = scaling;
    auto s = Scheduler::create(SchedulerKind::Lcm, c, SchedulerSemantics::Diffusers);
    const SchedulerState state = s->set_timesteps(1);
    ASSERT_EQ(state.timesteps, std::vector<double>{999});
    EXPECT_FALSE(s->needs_noise(state, 0));
    const StepResult r = s->step(state, Tensor::full({1, 1, 1, 1}, 1.0f), 0, Tensor::full({1, 1, 1, 1}, 0.0f));
    const double sc = 999 * scaling, c_out = sc / std::sqrt(sc * sc + 0.25);
    EXPECT_NEAR(r.prev_sample[0], c_out, 1e-6) << "timestep_scaling " << scaling;
    std::printf("[lcm] timestep_scaling %g: c_out %.7f (expected %.7f)\n", scaling, r.prev_sample[0], c_out);
  }
}

TEST(SchedulerSelection, UnsupportedOptionsAreRefusedByName) {
  using K = SchedulerKind;
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"use_beta_sigmas": true})", K::Euler); },
                          "'use_beta_sigmas' = true is not supported by this EulerDiscreteScheduler");
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"use_exponential_sigmas": true})", K::Lms); },
                          "use_exponential_sigmas");
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"thresholding": true})", K::Lcm); },
                          "thresholding");
  expect_error_mentioning(
      [] { SchedulerConfig::from_json(R"({"prediction_type": "sample"})", K::EulerAncestral); },
      "prediction_type 'sample' is not supported (Euler ancestral");
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"original_inference_steps": 0})", K::Lcm); },
                          "original_inference_steps must lie in [1, num_train_timesteps = 1000]");
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"original_inference_steps": 2.5})", K::Lcm); },
                          "'original_inference_steps' must be an integer");
  expect_error_mentioning([] { SchedulerConfig::from_json(R"({"timestep_scaling": "big"})", K::Lcm); },
                          "'timestep_scaling' must be a number");
  expect_error_mentioning(
      [] { SchedulerConfig::from_json(R"({"timestep_spacing": "uniform"})", K::EulerAncestral); },
      "timestep_spacing 'uniform' is not supported");
  // EulerAncestralDiscreteScheduler has no use_karras_sigmas option: diffusers ignores the key.
  EXPECT_NO_THROW(SchedulerConfig::from_json(R"({"use_karras_sigmas": true})", K::EulerAncestral));
}

TEST(SchedulerSelection, LcmStepCounts) {
  auto s = tiny(SchedulerKind::Lcm);
  EXPECT_NO_THROW(s->set_timesteps(50));
  expect_error_mentioning([&] { s->set_timesteps(51); }, "cannot exceed original_inference_steps (50)");
  expect_error_mentioning([&] { s->set_timesteps(0); }, "at least 1");
}

TEST(SchedulerSelection, NoiseContract) {
  const Tensor x = Tensor::full({1, 4, 2, 2}, 0.5f), m = Tensor::full({1, 4, 2, 2}, 0.1f);
  const Tensor z = Tensor::full({1, 4, 2, 2}, 1.0f), z2 = Tensor::full({1, 4, 2, 2}, -1.0f);
  for (SchedulerKind k : {SchedulerKind::Lcm, SchedulerKind::EulerAncestral}) {
    SCOPED_TRACE(scheduler_name(k));
    auto s = tiny(k, SchedulerSemantics::Flax);  // no Flax class: the torch algorithm runs
    EXPECT_EQ(s->semantics(), SchedulerSemantics::Diffusers);
    const SchedulerState state = s->set_timesteps(3);
    EXPECT_TRUE(s->needs_noise(state, 0));
    EXPECT_TRUE(s->needs_noise(state, 1));
    EXPECT_FALSE(s->needs_noise(state, 2));
    expect_error_mentioning([&] { s->step(state, m, 0, x); }, "adds noise");
    expect_error_mentioning([&] { s->step(state, m, 0, x, Tensor()); },
                            "adds noise but no noise tensor was given");
    expect_error_mentioning(
        [&] {
          s->step(state, m, 0, x, Tensor::full({1, 4, 2, 3}, 1.0f));
        },
        "shapes differ");
    // The noise enters the result: two noises, two samples; the state is the same.
    const StepResult a = s->step(state, m, 0, x, z), b = s->step(state, m, 0, x, z2);
    EXPECT_NE(a.prev_sample[0], b.prev_sample[0]);
    EXPECT_EQ(a.pred_original_sample[0], b.pred_original_sample[0]);
    // The last step takes no noise: with or without it, the same result.
    SchedulerState st = a.state;
    st = s->step(st, m, 1, x, z).state;
    const StepResult last = s->step(st, m, 2, x), last_with = s->step(st, m, 2, x, z);
    EXPECT_EQ(last.prev_sample[0], last_with.prev_sample[0]);
  }
  // Deterministic schedulers never need noise and ignore what they are given.
  for (SchedulerKind k : {SchedulerKind::Pndm, SchedulerKind::Ddim, SchedulerKind::Lms, SchedulerKind::DpmSolverPP,
                          SchedulerKind::Euler}) {
    auto s = tiny(k);
    const SchedulerState state = s->set_timesteps(3);
    EXPECT_FALSE(s->needs_noise(state, 0)) << scheduler_name(k);
    EXPECT_EQ(s->step(state, m, 0, x, z).prev_sample[0], s->step(state, m, 0, x).prev_sample[0]) << scheduler_name(k);
  }
}

}  // namespace
