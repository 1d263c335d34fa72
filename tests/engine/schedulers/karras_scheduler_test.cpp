// Karras sigmas (use_karras_sigmas) of LMS, Euler and DPM-Solver++ against diffusers 0.31
// (tests/data/karras-sigmas/karras.safetensors, made by tools/goldens/make_karras_goldens.py):
// timesteps, sigmas and init_noise_sigma for 1-50 steps and every spacing, Euler's own sigma
// bounds, DPM-Solver's final sigma_min, and whole trajectories open and closed loop.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct Variant {
  const char* name;  // the golden's prefix
  SchedulerKind kind;
  const char* extra_json;  // keys beside tiny-sd's config
};
const Variant kVariants[] = {
    {"lms", SchedulerKind::Lms, ""},
    {"dpmpp2m", SchedulerKind::DpmSolverPP, ""},
    {"euler", SchedulerKind::Euler, ""},
    {"euler_bounds", SchedulerKind::Euler, R"("sigma_min": 0.1, "sigma_max": 10.0,)"},
    {"dpmpp2m_sigma_min", SchedulerKind::DpmSolverPP, R"("final_sigmas_type": "sigma_min",)"},
};
const int kGridSteps[] = {1, 2, 3, 4, 5, 8, 10, 20, 25, 50};

const SafetensorsFile& goldens() {
  static std::shared_ptr<SafetensorsFile> f =
      SafetensorsFile::open(data_dir() / "karras-sigmas" / "karras.safetensors");
  return *f;
}

// Cls.from_config(tiny-sd's config + use_karras_sigmas + the variant's keys + timestep_spacing),
// read through SchedulerConfig::from_json as a model folder's file would be.
std::unique_ptr<Scheduler> make(const Variant& v, TimestepSpacing spacing,
                                SchedulerSemantics semantics = SchedulerSemantics::Diffusers) {
  SchedulerConfig config = SchedulerConfig::from_json(
      tiny_sd_scheduler_json_with(std::string(R"("use_karras_sigmas": true, )") + v.extra_json), v.kind);
  EXPECT_TRUE(config.use_karras_sigmas);
  config.timestep_spacing = spacing;
  return Scheduler::create(v.kind, config, semantics);
}

std::string key(const Variant& v, TimestepSpacing spacing, int n, const std::string& what) {
  return std::string(v.name) + "." + timestep_spacing_name(spacing) + ".n" + std::to_string(n) + "." + what;
}

Tensor golden(const std::string& name) {
  return goldens().to_f32(name);
}

// Relative difference in float32 units of the last place.
double ulps(double a, double b) {
  const float fa = static_cast<float>(a), fb = static_cast<float>(b);
  if (fa == fb) return 0;
  return std::fabs(fa - fb) / std::fabs(std::nextafter(fb, 2 * fb + 1) - fb);
}

// `f` throws octodiff::Error whose message holds `needle`.
template <typename F>
void expect_error_containing(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KarrasSigmas, GridsSigmasAndInitNoiseSigmaMatchDiffusers) {
  int checked = 0;
  double worst_t = 0, worst_sigma_ulps = 0;
  for (const Variant& v : kVariants)
    for (TimestepSpacing spacing : kSpacings)
      for (int n : kGridSteps) {
        SCOPED_TRACE(key(v, spacing, n, ""));
        auto s = make(v, spacing);
        const SchedulerState state = s->set_timesteps(n);
        const std::vector<double> ref_t = golden_numbers(goldens(), key(v, spacing, n, "timesteps"));
        ASSERT_EQ(s->num_model_calls(state), static_cast<int>(ref_t.size()));
        for (int i = 0; i < s->num_model_calls(state); ++i) {
          // DPM-Solver's are integers (rounded); LMS's float64 and Euler's float32 read-backs
          // through np.log and np.interp.
          const double t = s->model_timestep(state, i);
          worst_t = std::max(worst_t, std::fabs(t - ref_t[i]));
          EXPECT_NEAR(t, ref_t[i], 1e-3) << "timesteps[" << i << "]";
          if (v.kind == SchedulerKind::DpmSolverPP) {
            EXPECT_EQ(t, ref_t[i]) << "timesteps[" << i << "]";
          }
        }
        const std::vector<double> ref_s = golden_numbers(goldens(), key(v, spacing, n, "sigmas"));
        ASSERT_EQ(state.sigmas.size(), ref_s.size());
        for (size_t i = 0; i < ref_s.size(); ++i) {
          worst_sigma_ulps = std::max(worst_sigma_ulps, ulps(state.sigmas[i], ref_s[i]));
          EXPECT_LE(ulps(state.sigmas[i], ref_s[i]), 1.0) << "sigmas[" << i << "]";
        }
        const double ref_init = golden_numbers(goldens(), key(v, spacing, n, "init_noise_sigma"))[0];
        EXPECT_LE(ulps(s->init_noise_sigma(state), ref_init), 1.0);
        ++checked;
      }
  std::printf(
      "[karras grids] %d (variant, spacing, steps) grids: timesteps within %.3g of diffusers' (DPM-Solver's "
      "equal), sigmas within %.1f float32 ulp\n",
      checked, worst_t, worst_sigma_ulps);
  EXPECT_EQ(checked, 5 * 3 * 10);
}

TEST(KarrasSigmas, DiffersFromTheUniformGridAndDpmSolverIgnoresTheSpacing) {
  for (const Variant& v : kVariants) {
    auto karras = make(v, TimestepSpacing::Leading);
    SchedulerConfig plain_config = karras->config();
    plain_config.use_karras_sigmas = false;
    auto plain = Scheduler::create(v.kind, plain_config, SchedulerSemantics::Diffusers);
    const SchedulerState a = karras->set_timesteps(10), b = plain->set_timesteps(10);
    EXPECT_NE(a.sigmas, b.sigmas) << v.name;
    // Karras spends more steps at low noise: the middle sigma is below the uniform grid's.
    EXPECT_LT(a.sigmas[5], b.sigmas[5]) << v.name;
    if (v.kind == SchedulerKind::DpmSolverPP) {
      for (TimestepSpacing spacing : kSpacings)
        EXPECT_EQ(make(v, spacing)->set_timesteps(10).timesteps, a.timesteps) << v.name;
    }
  }
}

TEST(KarrasSigmas, FlaxSemanticsRunTheTorchAlgorithm) {
  // diffusers' Flax classes have no Karras sigmas: Scheduler::create gives the torch class's.
  for (const Variant& v : kVariants) {
    auto flax = make(v, TimestepSpacing::Leading, SchedulerSemantics::Flax);
    auto torch = make(v, TimestepSpacing::Leading, SchedulerSemantics::Diffusers);
    EXPECT_EQ(flax->semantics(), SchedulerSemantics::Diffusers) << v.name;
    const SchedulerState a = flax->set_timesteps(8), b = torch->set_timesteps(8);
    EXPECT_EQ(a.timesteps, b.timesteps) << v.name;
    EXPECT_EQ(a.sigmas, b.sigmas) << v.name;
  }
}

TEST(KarrasSigmas, ConfigurationsThatCannotWorkAreRefused) {
  // Classes without the option ignore the key, as diffusers' from_config does.
  EXPECT_FALSE(SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("use_karras_sigmas": true,)"),
                                          SchedulerKind::Pndm)
                   .use_karras_sigmas);
  EXPECT_FALSE(SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("use_karras_sigmas": true,)"),
                                          SchedulerKind::EulerAncestral)
                   .use_karras_sigmas);
  SchedulerConfig pndm = SchedulerConfig::defaults(SchedulerKind::Pndm);
  pndm.use_karras_sigmas = true;
  expect_error_containing([&] { Scheduler::create(SchedulerKind::Pndm, pndm, SchedulerSemantics::Flax); },
                          "has no Karras sigmas");
  expect_error_containing(
      [&] {
        SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("use_karras_sigmas": "yes",)"),
                                   SchedulerKind::Euler);
      },
      "'use_karras_sigmas' must be true or false");
  expect_error_containing(
      [&] {
        SchedulerConfig::from_json(
            tiny_sd_scheduler_json_with(R"("use_karras_sigmas": true, "sigma_min": -1,)"),
            SchedulerKind::Euler);
      },
      "sigma_min and sigma_max must be positive");
  // Other sigma schedules stay refused by name.
  expect_error_containing(
      [&] {
        SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("use_exponential_sigmas": true,)"),
                                   SchedulerKind::Euler);
      },
      "use_exponential_sigmas");
  // Bounds only matter with Karras sigmas: without them a file's odd value is not refused.
  EXPECT_FALSE(
      SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("sigma_min": 0,)"), SchedulerKind::Euler)
          .use_karras_sigmas);
  // null bounds are Euler's defaults (SDXL's configs write them).
  EXPECT_FALSE(
      SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("sigma_min": null, "sigma_max": null,)"),
                                 SchedulerKind::Euler)
          .sigma_min.has_value());
}

struct TrajectoryCase {
  Variant variant;
  TimestepSpacing spacing;
  int steps;
};

void PrintTo(const TrajectoryCase& c, std::ostream* os) {
  *os << c.variant.name << " " << timestep_spacing_name(c.spacing) << " n" << c.steps;
}

std::vector<TrajectoryCase> all_runs() {
  std::vector<TrajectoryCase> runs;
  for (const Variant& v : kVariants)
    for (TimestepSpacing spacing : kSpacings)
      for (int n : {4, 10, 20})
        if (goldens().find(key(v, spacing, n, "samples"))) runs.push_back({v, spacing, n});
  return runs;
}

class KarrasTrajectory : public ::testing::TestWithParam<TrajectoryCase> {
 protected:
  const TrajectoryCase& run() const { return GetParam(); }
  std::string key(const std::string& what) const {
    return ::key(run().variant, run().spacing, run().steps, what);
  }
};

TEST_P(KarrasTrajectory, OpenLoop) {
  auto s = make(run().variant, run().spacing);
  const bool has_pred = goldens().find(key("pred_original")) != nullptr;
  const Tensor pred = has_pred ? golden(key("pred_original")) : Tensor();
  expect_open_loop_parity(*s, s->set_timesteps(run().steps), golden(key("samples")),
                          golden(key("model_inputs")), golden(key("model_outputs")),
                          has_pred ? &pred : nullptr, key(""), kRel);
}

TEST_P(KarrasTrajectory, ClosedLoop) {
  auto s = make(run().variant, run().spacing);
  expect_closed_loop_parity(*s, s->set_timesteps(run().steps), golden("initial_latent"),
                            golden(key("samples")), golden(key("model_outputs")), key(""), kRel);
}

std::string run_name(const ::testing::TestParamInfo<TrajectoryCase>& info) {
  return std::string(info.param.variant.name) + "_" + timestep_spacing_name(info.param.spacing) + "_n" +
         std::to_string(info.param.steps);
}

INSTANTIATE_TEST_SUITE_P(KarrasSigmas, KarrasTrajectory, ::testing::ValuesIn(all_runs()), run_name);

TEST(KarrasSigmas, EveryVariantHasItsTrajectories) {
  // Guards the parameter list above against a golden file that lost its trajectories.
  const std::vector<TrajectoryCase> runs = all_runs();
  EXPECT_EQ(runs.size(), 5u * 3u * 2u + 5u);
}

}  // namespace
