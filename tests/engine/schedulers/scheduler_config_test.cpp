// Scheduler names, SchedulerConfig defaults / scheduler_config.json parsing, and the errors a
// user can run into (bad JSON, bad values, bad step counts, misuse of the step API).
#include <functional>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

constexpr SchedulerKind kAllKinds[] = {SchedulerKind::Pndm, SchedulerKind::Ddim, SchedulerKind::Lms,
                                       SchedulerKind::Euler, SchedulerKind::DpmSolverPP};

TEST(SchedulerNames, ParseAndPrint) {
  EXPECT_EQ(parse_scheduler_kind("pndm"), SchedulerKind::Pndm);
  EXPECT_EQ(parse_scheduler_kind("DDIM"), SchedulerKind::Ddim);
  EXPECT_EQ(parse_scheduler_kind("lms"), SchedulerKind::Lms);
  EXPECT_EQ(parse_scheduler_kind("euler"), SchedulerKind::Euler);
  for (const char* n : {"dpm++", "dpmpp2m", "dpm"})
    EXPECT_EQ(parse_scheduler_kind(n), SchedulerKind::DpmSolverPP);
  for (SchedulerKind k : kAllKinds) EXPECT_EQ(parse_scheduler_kind(scheduler_name(k)), k);
  EXPECT_EQ(scheduler_class_name(SchedulerKind::DpmSolverPP), "DPMSolverMultistepScheduler");
  expect_error_mentioning([] { parse_scheduler_kind("heun"); }, "valid: pndm, ddim, lms, dpm++, euler");
}

TEST(SchedulerConfigTest, ClassDefaults) {
  const SchedulerConfig pndm = SchedulerConfig::defaults(SchedulerKind::Pndm);
  EXPECT_EQ(pndm.beta_schedule, "linear");
  EXPECT_EQ(pndm.beta_start, 0.0001);
  EXPECT_EQ(pndm.beta_end, 0.02);
  EXPECT_FALSE(pndm.skip_prk_steps);
  EXPECT_FALSE(pndm.set_alpha_to_one);
  EXPECT_EQ(pndm.steps_offset, 0);
  EXPECT_EQ(pndm.timestep_spacing, TimestepSpacing::Leading);
  const SchedulerConfig ddim = SchedulerConfig::defaults(SchedulerKind::Ddim);
  EXPECT_TRUE(ddim.clip_sample);
  EXPECT_TRUE(ddim.set_alpha_to_one);
  EXPECT_EQ(ddim.clip_sample_range, 1.0);
  EXPECT_EQ(ddim.timestep_spacing, TimestepSpacing::Leading);
  for (SchedulerKind k : {SchedulerKind::Lms, SchedulerKind::Euler, SchedulerKind::DpmSolverPP})
    EXPECT_EQ(SchedulerConfig::defaults(k).timestep_spacing, TimestepSpacing::Linspace) << scheduler_name(k);
  const SchedulerConfig dpm = SchedulerConfig::defaults(SchedulerKind::DpmSolverPP);
  EXPECT_EQ(dpm.solver_order, 2);
  EXPECT_EQ(dpm.algorithm_type, "dpmsolver++");
  EXPECT_EQ(dpm.solver_type, "midpoint");
  EXPECT_TRUE(dpm.lower_order_final);
  EXPECT_EQ(dpm.final_sigmas_type, "zero");
  for (SchedulerKind k : kAllKinds)
    EXPECT_EQ(SchedulerConfig::defaults(k).prediction_type, PredictionType::Epsilon);
}

TEST(SchedulerConfigTest, SdJsonOverridesOnlyKeysPresent) {
  const std::string json = tiny_sd_scheduler_json();
  const SchedulerConfig pndm = SchedulerConfig::from_json(json, SchedulerKind::Pndm);
  EXPECT_EQ(pndm.beta_schedule, "scaled_linear");
  EXPECT_EQ(pndm.beta_start, 0.00085);
  EXPECT_EQ(pndm.beta_end, 0.012);
  EXPECT_TRUE(pndm.skip_prk_steps);
  EXPECT_FALSE(pndm.set_alpha_to_one);
  EXPECT_EQ(pndm.steps_offset, 1);
  EXPECT_TRUE(pndm.trained_betas.empty());  // "trained_betas": null
  EXPECT_EQ(pndm.timestep_spacing, TimestepSpacing::Leading);
  const SchedulerConfig ddim = SchedulerConfig::from_json(json, SchedulerKind::Ddim);
  EXPECT_FALSE(ddim.clip_sample);  // the json says false; the class default is true
  // Keys the file lacks keep the *target* class default, not the PNDM one.
  EXPECT_EQ(SchedulerConfig::from_json(json, SchedulerKind::Euler).timestep_spacing,
            TimestepSpacing::Linspace);
  EXPECT_EQ(SchedulerConfig::from_json(json, SchedulerKind::DpmSolverPP).solver_order, 2);
}

TEST(SchedulerConfigTest, ParsesValuesAndIgnoresUnknownKeys) {
  const SchedulerConfig c = SchedulerConfig::from_json(R"({
      "_class_name": "DPMSolverMultistepScheduler", "_diffusers_version": "0.31.0", "made_up_key": [1, 2],
      "prediction_type": "v_prediction", "timestep_spacing": "trailing", "solver_order": 3,
      "algorithm_type": "dpmsolver", "solver_type": "heun", "final_sigmas_type": "sigma_min",
      "lower_order_final": false, "lambda_min_clipped": -Infinity, "variance_type": null,
      "thresholding": false, "use_karras_sigmas": false, "euler_at_final": false,
      "sample_max_value": 1.0, "note": "NaN and Infinity inside strings stay strings"})",
                                                       SchedulerKind::DpmSolverPP);
  EXPECT_EQ(c.prediction_type, PredictionType::VPrediction);
  EXPECT_EQ(c.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_EQ(c.solver_order, 3);
  EXPECT_EQ(c.algorithm_type, "dpmsolver");
  EXPECT_EQ(c.solver_type, "heun");
  EXPECT_EQ(c.final_sigmas_type, "sigma_min");
  EXPECT_FALSE(c.lower_order_final);
  // trained_betas given as a list
  std::string betas = "[";
  for (int i = 0; i < 10; ++i) {
    if (i) betas += ",";
    betas += std::to_string(0.001 * (i + 1));
  }
  const SchedulerConfig t = SchedulerConfig::from_json(
      R"({"num_train_timesteps": 10, "trained_betas": )" + betas + "]}", SchedulerKind::Ddim);
  ASSERT_EQ(t.trained_betas.size(), 10u);
  auto s = Scheduler::create(SchedulerKind::Ddim, t, SchedulerSemantics::Diffusers);
  EXPECT_FLOAT_EQ(s->alphas_cumprod()[0], 0.999f);
  EXPECT_FLOAT_EQ(s->alphas_cumprod()[1], 0.999f * 0.998f);
}

TEST(SchedulerConfigTest, RejectsBadJsonAndValues) {
  const auto parse = [](const std::string& text, SchedulerKind kind = SchedulerKind::Pndm) {
    return [text, kind] { SchedulerConfig::from_json(text, kind); };
  };
  expect_error_mentioning(parse("{\"beta_start\": 0.1,"), "not valid JSON");
  expect_error_mentioning(parse("[1, 2]"), "must be a JSON object");
  expect_error_mentioning(parse(R"({"beta_schedule": "cosine"})"), "beta_schedule 'cosine'");
  expect_error_mentioning(parse(R"({"prediction_type": "noise"})"), "prediction_type 'noise'");
  expect_error_mentioning(parse(R"({"timestep_spacing": "uniform"})"), "timestep_spacing 'uniform'");
  // (sde-dpmsolver++ is the DpmSolverSde kind: sde_scheduler_test.cpp)
  expect_error_mentioning(
      parse(R"({"algorithm_type": "sde-dpmsolver"})", SchedulerKind::DpmSolverPP),
      "algorithm_type 'sde-dpmsolver' is not supported (use dpmsolver++, dpmsolver or sde-dpmsolver++)");
  expect_error_mentioning(parse(R"({"solver_order": 3})", SchedulerKind::DpmSolverSde),
                          "solver_order must be 1 or 2 with algorithm_type sde-dpmsolver++");
  expect_error_mentioning(parse(R"({"solver_type": "bh2"})", SchedulerKind::DpmSolverPP),
                          "solver_type 'bh2'");
  expect_error_mentioning(parse(R"({"solver_order": 4})", SchedulerKind::DpmSolverPP), "solver_order");
  expect_error_mentioning(parse(R"({"final_sigmas_type": "one"})", SchedulerKind::Euler),
                          "final_sigmas_type 'one'");
  expect_error_mentioning(parse(R"({"num_train_timesteps": "1000"})"),
                          "'num_train_timesteps' must be an integer");
  expect_error_mentioning(parse(R"({"num_train_timesteps": 1})"), "num_train_timesteps must be between");
  expect_error_mentioning(parse(R"({"beta_start": "small"})"), "'beta_start' must be a number");
  expect_error_mentioning(parse(R"({"skip_prk_steps": "yes"})"), "'skip_prk_steps' must be true or false");
  expect_error_mentioning(parse(R"({"steps_offset": -1})"), "steps_offset");
  expect_error_mentioning(parse(R"({"trained_betas": [0.1, 0.2]})"), "trained_betas has 2 values");
  expect_error_mentioning(parse(R"({"prediction_type": "sample"})", SchedulerKind::Pndm),
                          "PNDM handles epsilon and v_prediction");
  // Options this port does not implement are refused for the classes that know them...
  expect_error_mentioning(parse(R"({"thresholding": true})", SchedulerKind::Ddim), "'thresholding' = true");
  expect_error_mentioning(parse(R"({"use_exponential_sigmas": true})", SchedulerKind::Euler),
                          "'use_exponential_sigmas' = true");
  expect_error_mentioning(parse(R"({"use_lu_lambdas": true})", SchedulerKind::DpmSolverPP), "use_lu_lambdas");
  expect_error_mentioning(parse(R"({"lambda_min_clipped": -5.1})", SchedulerKind::DpmSolverPP),
                          "lambda_min_clipped");
  expect_error_mentioning(parse(R"({"interpolation_type": "log_linear"})", SchedulerKind::Euler),
                          "interpolation_type");
  // ... and ignored by classes that do not (as diffusers' from_config does).
  EXPECT_NO_THROW(SchedulerConfig::from_json(R"({"thresholding": true})", SchedulerKind::Pndm));
}

TEST(SchedulerConfigTest, SemanticsSpecificRestrictions) {
  SchedulerConfig euler = SchedulerConfig::defaults(SchedulerKind::Euler);
  euler.timestep_spacing = TimestepSpacing::Trailing;
  // Flax's Euler has no trailing spacing; Octodiff extends it with the torch grid (SD-Turbo's),
  // checked in scheduler_flax_test.cpp (FlaxEulerTrailing).
  EXPECT_NO_THROW(Scheduler::create(SchedulerKind::Euler, euler, SchedulerSemantics::Flax));
  EXPECT_NO_THROW(Scheduler::create(SchedulerKind::Euler, euler, SchedulerSemantics::Diffusers));
  euler.timestep_spacing = TimestepSpacing::Leading;
  euler.prediction_type = PredictionType::Sample;
  expect_error_mentioning([&] { Scheduler::create(SchedulerKind::Euler, euler, SchedulerSemantics::Flax); },
                          "sample");
  SchedulerConfig dpm = SchedulerConfig::defaults(SchedulerKind::DpmSolverPP);
  dpm.algorithm_type = "dpmsolver";
  expect_error_mentioning(
      [&] { Scheduler::create(SchedulerKind::DpmSolverPP, dpm, SchedulerSemantics::Diffusers); },
      "final_sigmas_type");
  EXPECT_NO_THROW(Scheduler::create(SchedulerKind::DpmSolverPP, dpm, SchedulerSemantics::Flax));
  dpm.final_sigmas_type = "sigma_min";
  EXPECT_NO_THROW(Scheduler::create(SchedulerKind::DpmSolverPP, dpm, SchedulerSemantics::Diffusers));
  SchedulerConfig pndm = SchedulerConfig::defaults(SchedulerKind::Pndm);  // PRK needs >= 4 steps
  expect_error_mentioning(
      [&] { Scheduler::create(SchedulerKind::Pndm, pndm, SchedulerSemantics::Flax)->set_timesteps(3); },
      "at least 4");
}

TEST(SchedulerErrors, StepCounts) {
  for (SchedulerKind k : kAllKinds) {
    for (auto sem : {SchedulerSemantics::Flax, SchedulerSemantics::Diffusers}) {
      auto s = Scheduler::create(k, SchedulerConfig::from_json(tiny_sd_scheduler_json(), k), sem);
      expect_error_mentioning([&] { s->set_timesteps(0); }, "at least 1");
      expect_error_mentioning([&] { s->set_timesteps(-3); }, "at least 1");
      expect_error_mentioning([&] { s->set_timesteps(1001); }, "cannot exceed");
      EXPECT_NO_THROW(s->set_timesteps(1)) << scheduler_name(k);
      EXPECT_NO_THROW(s->set_timesteps(1000)) << scheduler_name(k);
    }
  }
}

TEST(SchedulerErrors, StepMisuse) {
  for (SchedulerKind k : kAllKinds) {
    auto s = Scheduler::create(k, SchedulerConfig::from_json(tiny_sd_scheduler_json(), k),
                               SchedulerSemantics::Diffusers);
    const Tensor x = Tensor::full({1, 4, 2, 2}, 0.5f), m = Tensor::full({1, 4, 2, 2}, 0.1f);
    expect_error_mentioning([&] { s->step(SchedulerState{}, m, 0, x); }, "set_timesteps() first");
    SchedulerState state = s->set_timesteps(5);
    expect_error_mentioning([&] { s->step(state, m, 1, x); }, "steps must run in order");
    expect_error_mentioning([&] { s->step(state, m, 99, x); }, "outside the");
    expect_error_mentioning([&] { s->step(state, Tensor::full({1, 4, 2, 3}, 0.1f), 0, x); }, "shapes differ");
    expect_error_mentioning([&] { s->model_timestep(state, -1); }, "outside the");
  }
}

}  // namespace
