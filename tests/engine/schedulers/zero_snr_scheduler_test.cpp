// Zero terminal SNR (rescale_betas_zero_snr) against diffusers 0.31 (tests/data/zero-snr/
// schedulers.safetensors, made by tools/goldens/make_zero_snr_goldens.py): the rescaled ᾱ table of
// the six classes that have the option (with the 2⁻²⁴ floor of the sigma classes), timesteps,
// sigmas, init_noise_sigma and whole trajectories, open and closed loop with diffusers' noise
// injected — v-prediction on every spacing, epsilon where it stays finite, Karras sigmas; how a
// configuration file and the kinds without the option treat it; what is refused.
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct ClassCase {
  const char* name;  // the golden's prefix
  SchedulerKind kind;
  const char* extra;  // keys beside tiny-sd's config and rescale_betas_zero_snr
};
const ClassCase kClasses[] = {
    {"ddim", SchedulerKind::Ddim, ""},
    {"euler", SchedulerKind::Euler, ""},
    {"euler_a", SchedulerKind::EulerAncestral, ""},
    {"dpmpp2m", SchedulerKind::DpmSolverPP, ""},
    {"dpmpp2m_sde", SchedulerKind::DpmSolverSde, R"("algorithm_type": "sde-dpmsolver++",)"},
    {"lcm", SchedulerKind::Lcm, ""},
};
struct VariantCase {
  const char* name;
  const char* keys;
};
const VariantCase kVariants[] = {
    {"v", R"("prediction_type": "v_prediction",)"},
    {"eps", R"("prediction_type": "epsilon",)"},
    {"karras", R"("prediction_type": "v_prediction", "use_karras_sigmas": true,)"},
};

const SafetensorsFile& goldens() {
  static std::shared_ptr<SafetensorsFile> f =
      SafetensorsFile::open(data_dir() / "zero-snr" / "schedulers.safetensors");
  return *f;
}

// Cls.from_config(tiny-sd's config + rescale_betas_zero_snr + the class's and variant's keys), read
// through SchedulerConfig::from_json as a model folder's file would be, at `spacing`.
std::unique_ptr<Scheduler> make(const ClassCase& c, const VariantCase& v, TimestepSpacing spacing,
                                SchedulerSemantics semantics = SchedulerSemantics::Diffusers) {
  SchedulerConfig config = SchedulerConfig::from_json(
      tiny_sd_scheduler_json_with(std::string(R"("rescale_betas_zero_snr": true, )") + c.extra + v.keys),
      c.kind);
  EXPECT_TRUE(config.rescale_betas_zero_snr);
  config.timestep_spacing = spacing;
  return Scheduler::create(c.kind, config, semantics);
}

struct TrajectoryCase {
  ClassCase cls;
  VariantCase variant;
  TimestepSpacing spacing;
  int steps;
};

void PrintTo(const TrajectoryCase& c, std::ostream* os) {
  *os << c.cls.name << " " << c.variant.name << " " << timestep_spacing_name(c.spacing) << " n" << c.steps;
}

std::string key(const TrajectoryCase& c, const std::string& what) {
  return std::string(c.cls.name) + "." + c.variant.name + "." + timestep_spacing_name(c.spacing) + ".n" +
         std::to_string(c.steps) + "." + what;
}

std::vector<TrajectoryCase> all_runs() {
  std::vector<TrajectoryCase> runs;
  for (const ClassCase& c : kClasses)
    for (const VariantCase& v : kVariants)
      for (TimestepSpacing spacing : kSpacings)
        for (int n : {1, 4, 8, 10})
          if (goldens().find(key({c, v, spacing, n}, "samples"))) runs.push_back({c, v, spacing, n});
  return runs;
}

class ZeroSnrTrajectory : public ::testing::TestWithParam<TrajectoryCase> {
 protected:
  const TrajectoryCase& run() const { return GetParam(); }
  bool has(const std::string& what) const { return goldens().find(key(run(), what)) != nullptr; }
  Tensor golden(const std::string& what) const { return goldens().to_f32(key(run(), what)); }
  TrajectoryNoise noise(const Scheduler& s) const {
    if (!has("noise")) return {};
    const Tensor all = golden("noise");
    return [&s, all](const SchedulerState& state, int k) {
      return s.needs_noise(state, k) ? row(all, k) : Tensor();
    };
  }
};

TEST_P(ZeroSnrTrajectory, TimestepsSigmasAndInitialScaleMatchDiffusers) {
  auto s = make(run().cls, run().variant, run().spacing);
  const SchedulerState state = s->set_timesteps(run().steps);
  const std::vector<double> ref_t = golden_numbers(goldens(), key(run(), "timesteps"));
  ASSERT_EQ(s->num_model_calls(state), static_cast<int>(ref_t.size()));
  // Euler's Karras timesteps are read back from the sigmas through np.log and np.interp (within
  // 1e-3, as karras_scheduler_test.cpp); every other grid is equal.
  const bool read_back =
      run().cls.kind == SchedulerKind::Euler && std::string(run().variant.name) == "karras";
  for (int i = 0; i < s->num_model_calls(state); ++i) {
    if (read_back)
      EXPECT_NEAR(s->model_timestep(state, i), ref_t[i], 1e-3) << i;
    else
      EXPECT_EQ(static_cast<float>(s->model_timestep(state, i)), static_cast<float>(ref_t[i])) << i;
  }
  if (has("sigmas")) {
    const std::vector<double> ref_s = golden_numbers(goldens(), key(run(), "sigmas"));
    ASSERT_EQ(state.sigmas.size(), ref_s.size());
    for (size_t i = 0; i < ref_s.size(); ++i)
      EXPECT_EQ(static_cast<float>(state.sigmas[i]), static_cast<float>(ref_s[i])) << "sigmas[" << i << "]";
  }
  EXPECT_EQ(static_cast<float>(s->init_noise_sigma(state)),
            static_cast<float>(golden_numbers(goldens(), key(run(), "init_noise_sigma"))[0]));
}

TEST_P(ZeroSnrTrajectory, OpenLoop) {
  auto s = make(run().cls, run().variant, run().spacing);
  const Tensor pred = has("pred_original") ? golden("pred_original") : Tensor();
  expect_open_loop_parity(*s, s->set_timesteps(run().steps), golden("samples"), golden("model_inputs"),
                          golden("model_outputs"), has("pred_original") ? &pred : nullptr, key(run(), ""),
                          kRel, noise(*s));
}

TEST_P(ZeroSnrTrajectory, ClosedLoop) {
  auto s = make(run().cls, run().variant, run().spacing);
  expect_closed_loop_parity(*s, s->set_timesteps(run().steps), goldens().to_f32("initial_latent"),
                            golden("samples"), golden("model_outputs"), key(run(), ""), kRel, noise(*s));
}

std::string run_name(const ::testing::TestParamInfo<TrajectoryCase>& info) {
  return std::string(info.param.cls.name) + "_" + info.param.variant.name + "_" +
         timestep_spacing_name(info.param.spacing) + "_n" + std::to_string(info.param.steps);
}

INSTANTIATE_TEST_SUITE_P(ZeroSnr, ZeroSnrTrajectory, ::testing::ValuesIn(all_runs()), run_name);

}  // namespace

TEST(ZeroSnr, EveryTrajectoryOfTheGoldensRuns) {
  // 5 classes × 3 spacings × 3 step counts in v, LCM × 3, epsilon × 5, Karras × 3.
  EXPECT_EQ(all_runs().size(), 5u * 3u * 3u + 3u + 5u + 3u);
}

// The rescaled table itself: ᾱ of the last training timestep 0 (DDIM, LCM) or 2⁻²⁴ (the sigma
// classes), every entry equal to diffusers' f32 table.
TEST(ZeroSnr, RescaledAlphasCumprodEqualDiffusers) {
  for (const ClassCase& c : kClasses) {
    auto s = make(c, kVariants[0], TimestepSpacing::Leading);
    const std::vector<double> ref = golden_numbers(goldens(), std::string(c.name) + ".alphas_cumprod");
    ASSERT_EQ(s->alphas_cumprod().size(), ref.size()) << c.name;
    int unequal = 0;
    for (size_t t = 0; t < ref.size(); ++t) unequal += s->alphas_cumprod()[t] != static_cast<float>(ref[t]);
    EXPECT_EQ(unequal, 0) << c.name;
    const bool sigma_class = c.kind != SchedulerKind::Ddim && c.kind != SchedulerKind::Lcm;
    EXPECT_EQ(s->alphas_cumprod().back(), sigma_class ? 0x1p-24f : 0.0f) << c.name;
    std::printf("[zero-snr] %s: alphas_cumprod equal to diffusers' at all %zu timesteps, last %g\n", c.name,
                ref.size(), static_cast<double>(s->alphas_cumprod().back()));
  }
}

// No Flax class has the option: a zero-SNR scheduler runs the torch algorithm under Flax semantics.
TEST(ZeroSnr, FlaxSemanticsRunTheTorchClass) {
  for (const ClassCase& c : kClasses) {
    auto flax = make(c, kVariants[0], TimestepSpacing::Leading, SchedulerSemantics::Flax);
    EXPECT_EQ(flax->semantics(), SchedulerSemantics::Diffusers) << c.name;
  }
}

// PNDM and LMS have no such option in diffusers: their from_config ignores the key, and asking for
// it is refused by name.
TEST(ZeroSnr, KindsWithoutTheOptionIgnoreTheKeyAndRefuseIt) {
  const std::string json = tiny_sd_scheduler_json_with(R"("rescale_betas_zero_snr": true,)");
  for (SchedulerKind kind : {SchedulerKind::Pndm, SchedulerKind::Lms}) {
    EXPECT_FALSE(supports_zero_snr(kind));
    SchedulerConfig config = SchedulerConfig::from_json(json, kind);
    EXPECT_FALSE(config.rescale_betas_zero_snr);
    config.rescale_betas_zero_snr = true;
    expect_error_mentioning([&] { config.validate(kind); }, "has no zero terminal SNR");
  }
  EXPECT_FALSE(SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("rescale_betas_zero_snr": false,)"),
                                          SchedulerKind::Ddim)
                   .rescale_betas_zero_snr);
  expect_error_mentioning(
      [&] {
        SchedulerConfig::from_json(tiny_sd_scheduler_json_with(R"("rescale_betas_zero_snr": "yes",)"),
                                   SchedulerKind::Ddim);
      },
      "'rescale_betas_zero_snr' must be");
}

// DDIM and LCM divide an epsilon prediction by √ᾱ, which is 0 at the last training timestep:
// diffusers returns NaN images there; Octodiff refuses that step with a reason. The steps after
// it (where an image-to-image run starts), leading spacing (which never reaches it) and
// v-prediction run.
TEST(ZeroSnr, EpsilonAtTheNoSignalTimestepIsRefused) {
  const Tensor x = Tensor::full({1, 4, 2, 2}, 0.5f), m = Tensor::full({1, 4, 2, 2}, 0.1f);
  const auto step = [&](const Scheduler& s, const SchedulerState& state, int i) {
    return s.needs_noise(state, i) ? s.step(state, m, i, x, x) : s.step(state, m, i, x);
  };
  for (const ClassCase& c : {kClasses[0], kClasses[5]}) {
    auto s = make(c, kVariants[1], TimestepSpacing::Trailing);
    const SchedulerState state = s->set_timesteps(4);
    ASSERT_EQ(s->model_timestep(state, 0), 999.0) << c.name;
    expect_error_mentioning([&] { step(*s, state, 0); }, "timestep 999 has no signal left");
    const SchedulerState img2img = s->set_timesteps_for_strength(4, 0.75);  // starts after it
    EXPECT_LT(s->model_timestep(img2img, img2img.begin_index), 999.0) << c.name;
    EXPECT_NO_THROW(step(*s, img2img, img2img.begin_index)) << c.name;
    auto v = make(c, kVariants[0], TimestepSpacing::Trailing);
    const StepResult r = step(*v, v->set_timesteps(4), 0);
    EXPECT_TRUE(std::isfinite(r.prev_sample[0])) << c.name;
  }
  auto leading = make(kClasses[0], kVariants[1], TimestepSpacing::Leading);
  const SchedulerState state = leading->set_timesteps(4);
  EXPECT_TRUE(std::isfinite(leading->step(state, m, 0, x).prev_sample[0]));
}

TEST(ZeroSnr, AllZeroBetasCannotBeRescaled) {
  SchedulerConfig config = SchedulerConfig::defaults(SchedulerKind::Ddim);
  config.beta_start = config.beta_end = 0;
  config.rescale_betas_zero_snr = true;
  expect_error_mentioning(
      [&] { Scheduler::create(SchedulerKind::Ddim, config, SchedulerSemantics::Diffusers); },
      "betas that are not all 0");
}
