// DPM++ 2M SDE (DPMSolverMultistepScheduler, algorithm_type "sde-dpmsolver++") against diffusers
// 0.31 (tests/data/sde-dpmsolver/sde.safetensors, made by tools/goldens/make_sde_goldens.py):
// timesteps, sigmas and whole trajectories, open and closed loop, with diffusers' own noise
// injected — second order midpoint and heun, first order, Karras sigmas, a final sigma_min,
// v-prediction, every spacing, 1-20 steps; and how a configuration names the kind.
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct Variant {
  const char* name;        // the golden's prefix
  const char* extra_json;  // keys beside tiny-sd's config and algorithm_type
};
const Variant kVariants[] = {
    {"sde", ""},
    {"sde_heun", R"("solver_type": "heun",)"},
    {"sde_order1", R"("solver_order": 1,)"},
    {"sde_karras", R"("use_karras_sigmas": true,)"},
    {"sde_sigma_min", R"("final_sigmas_type": "sigma_min",)"},
    {"sde_v", R"("prediction_type": "v_prediction",)"},
};

const SafetensorsFile& goldens() {
  static std::shared_ptr<SafetensorsFile> f =
      SafetensorsFile::open(data_dir() / "sde-dpmsolver" / "sde.safetensors");
  return *f;
}

// DPMSolverMultistepScheduler.from_config(tiny-sd's config + algorithm_type + the variant's keys +
// timestep_spacing), read through SchedulerConfig::from_json as a model folder's file would be.
std::unique_ptr<Scheduler> make(const Variant& v, TimestepSpacing spacing,
                                SchedulerSemantics semantics = SchedulerSemantics::Diffusers) {
  const std::string json =
      tiny_sd_scheduler_json_with(std::string(R"("algorithm_type": "sde-dpmsolver++", )") + v.extra_json);
  EXPECT_EQ(scheduler_config_kind(json), SchedulerKind::Pndm);  // the file names PNDMScheduler
  SchedulerConfig config = SchedulerConfig::from_json(json, SchedulerKind::DpmSolverSde);
  config.timestep_spacing = spacing;
  return Scheduler::create(SchedulerKind::DpmSolverSde, config, semantics);
}

struct TrajectoryCase {
  Variant variant;
  TimestepSpacing spacing;
  int steps;
};

void PrintTo(const TrajectoryCase& c, std::ostream* os) {
  *os << c.variant.name << " " << timestep_spacing_name(c.spacing) << " n" << c.steps;
}

std::string key(const TrajectoryCase& c, const std::string& what) {
  return std::string(c.variant.name) + "." + timestep_spacing_name(c.spacing) + ".n" +
         std::to_string(c.steps) + "." + what;
}

std::vector<TrajectoryCase> all_runs() {
  std::vector<TrajectoryCase> runs;
  for (const Variant& v : kVariants)
    for (TimestepSpacing spacing : kSpacings)
      for (int n : {1, 4, 10, 20})
        if (goldens().find(key({v, spacing, n}, "samples"))) runs.push_back({v, spacing, n});
  return runs;
}

class SdeTrajectory : public ::testing::TestWithParam<TrajectoryCase> {
 protected:
  const TrajectoryCase& run() const { return GetParam(); }
  Tensor golden(const std::string& what) const { return goldens().to_f32(key(run(), what)); }
  // diffusers drew noise on every step; ours is asked for where it is not multiplied by 0.
  TrajectoryNoise noise(const Scheduler& s) const {
    const Tensor all = golden("noise");
    return [&s, all](const SchedulerState& state, int k) {
      return s.needs_noise(state, k) ? row(all, k) : Tensor();
    };
  }
};

TEST_P(SdeTrajectory, TimestepsAndSigmasMatchDiffusers) {
  auto s = make(run().variant, run().spacing);
  const SchedulerState state = s->set_timesteps(run().steps);
  const std::vector<double> ref_t = golden_numbers(goldens(), key(run(), "timesteps"));
  ASSERT_EQ(s->num_model_calls(state), static_cast<int>(ref_t.size()));
  for (int i = 0; i < s->num_model_calls(state); ++i) EXPECT_EQ(s->model_timestep(state, i), ref_t[i]) << i;
  const std::vector<double> ref_s = golden_numbers(goldens(), key(run(), "sigmas"));
  ASSERT_EQ(state.sigmas.size(), ref_s.size());
  for (size_t i = 0; i < ref_s.size(); ++i)
    EXPECT_EQ(static_cast<float>(state.sigmas[i]), static_cast<float>(ref_s[i])) << "sigmas[" << i << "]";
  // Noise on every step but one that ends at sigma 0.
  const bool final_zero = ref_s.back() == 0.0;
  for (int i = 0; i < s->num_model_calls(state); ++i)
    EXPECT_EQ(s->needs_noise(state, i), !(final_zero && i + 1 == s->num_model_calls(state))) << i;
}

TEST_P(SdeTrajectory, OpenLoop) {
  auto s = make(run().variant, run().spacing);  // (diffusers' DPM-Solver returns no pred_original_sample)
  expect_open_loop_parity(*s, s->set_timesteps(run().steps), golden("samples"), golden("model_inputs"),
                          golden("model_outputs"), nullptr, key(run(), ""), kRel, noise(*s));
}

TEST_P(SdeTrajectory, ClosedLoop) {
  auto s = make(run().variant, run().spacing);
  expect_closed_loop_parity(*s, s->set_timesteps(run().steps), goldens().to_f32("initial_latent"),
                            golden("samples"), golden("model_outputs"), key(run(), ""), kRel, noise(*s));
}

std::string run_name(const ::testing::TestParamInfo<TrajectoryCase>& info) {
  return std::string(info.param.variant.name) + "_" + timestep_spacing_name(info.param.spacing) + "_n" +
         std::to_string(info.param.steps);
}

INSTANTIATE_TEST_SUITE_P(DpmSolverSde, SdeTrajectory, ::testing::ValuesIn(all_runs()), run_name);

TEST(DpmSolverSde, EveryVariantHasItsTrajectories) {
  // Guards the parameter list above against a golden file that lost its trajectories.
  EXPECT_EQ(all_runs().size(), 6u * 3u * 3u + 6u);
}

TEST(DpmSolverSde, TheNoiseMattersAndIsAskedFor) {
  auto s = make(kVariants[0], TimestepSpacing::Linspace);
  const SchedulerState state = s->set_timesteps(4);
  const TrajectoryCase c{kVariants[0], TimestepSpacing::Linspace, 4};
  const Tensor x = row(goldens().to_f32(key(c, "samples")), 0),
               m = row(goldens().to_f32(key(c, "model_outputs")), 0);
  const Tensor z = row(goldens().to_f32(key(c, "noise")), 0);
  expect_error_mentioning([&] { s->step(state, m, 0, x); }, "DPM++ 2M SDE step 0 adds noise");
  expect_error_mentioning([&] { s->step(state, m, 0, x, Tensor()); },
                          "adds noise but no noise tensor was given");
  Tensor other = z.clone();
  for (int64_t i = 0; i < other.numel(); ++i) other[i] = -other[i];
  const Tensor a = s->step(state, m, 0, x, z).prev_sample, b = s->step(state, m, 0, x, other).prev_sample;
  double diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(diff, 0.1);
}

TEST(DpmSolverSde, FlaxSemanticsRunTheTorchAlgorithm) {
  // diffusers has no Flax SDE solver: Scheduler::create gives the torch class's.
  auto flax = make(kVariants[0], TimestepSpacing::Leading, SchedulerSemantics::Flax);
  auto torch = make(kVariants[0], TimestepSpacing::Leading, SchedulerSemantics::Diffusers);
  EXPECT_EQ(flax->semantics(), SchedulerSemantics::Diffusers);
  EXPECT_EQ(flax->kind(), SchedulerKind::DpmSolverSde);
  EXPECT_EQ(flax->set_timesteps(8).sigmas, torch->set_timesteps(8).sigmas);
}

TEST(DpmSolverSde, AConfigurationNamesTheKindByItsAlgorithm) {
  const auto file = [](const std::string& keys) {
    return std::string(R"({"_class_name": "DPMSolverMultistepScheduler", )") + keys + "}";
  };
  EXPECT_EQ(scheduler_config_kind(file(R"("algorithm_type": "sde-dpmsolver++")")),
            SchedulerKind::DpmSolverSde);
  EXPECT_EQ(scheduler_config_kind(file(R"("algorithm_type": "dpmsolver++")")), SchedulerKind::DpmSolverPP);
  EXPECT_EQ(scheduler_config_kind(file(R"("solver_order": 2)")), SchedulerKind::DpmSolverPP);
  EXPECT_EQ(scheduler_config_kind(
                R"({"_class_name": "EulerDiscreteScheduler", "algorithm_type": "sde-dpmsolver++"})"),
            SchedulerKind::Euler);
  EXPECT_EQ(scheduler_config_kind(R"({"_class_name": "KDPM2DiscreteScheduler"})"), std::nullopt);
  expect_error_mentioning([&] { scheduler_config_kind(file(R"("algorithm_type": 2)")); },
                          "'algorithm_type' must be a string");
  // The kind chooses the algorithm whatever the file says: a request for plain DPM++ 2M on an SDE
  // folder runs the ODE solver, and the other way round.
  EXPECT_EQ(
      SchedulerConfig::from_json(file(R"("algorithm_type": "sde-dpmsolver++")"), SchedulerKind::DpmSolverPP)
          .algorithm_type,
      "dpmsolver++");
  EXPECT_EQ(SchedulerConfig::from_json(file(R"("algorithm_type": "dpmsolver")"), SchedulerKind::DpmSolverSde)
                .algorithm_type,
            "sde-dpmsolver++");
  EXPECT_EQ(SchedulerConfig::defaults(SchedulerKind::DpmSolverSde).algorithm_type, "sde-dpmsolver++");
  // diffusers 0.31 has no third-order SDE update, nor the deprecated sde-dpmsolver here.
  expect_error_mentioning(
      [&] { SchedulerConfig::from_json(file(R"("solver_order": 3)"), SchedulerKind::DpmSolverSde); },
      "solver_order must be 1 or 2 with algorithm_type sde-dpmsolver++");
  expect_error_mentioning(
      [&] {
        SchedulerConfig::from_json(file(R"("algorithm_type": "sde-dpmsolver")"), SchedulerKind::DpmSolverPP);
      },
      "algorithm_type 'sde-dpmsolver' is not supported");
  SchedulerConfig wrong = SchedulerConfig::defaults(SchedulerKind::DpmSolverSde);
  wrong.algorithm_type = "dpmsolver++";
  expect_error_mentioning(
      [&] { Scheduler::create(SchedulerKind::DpmSolverSde, wrong, SchedulerSemantics::Diffusers); },
      "needs algorithm_type sde-dpmsolver++");
}

}  // namespace
