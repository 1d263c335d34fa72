// LCM, Euler ancestral and every timestep_spacing of every scheduler against diffusers 0.31
// (tests/data/fast-schedulers, made by tools/goldens/make_fast_scheduler_goldens.py): grids,
// sigmas and init_noise_sigma for 1-25 steps, and whole trajectories with diffusers' own noise
// injected into the stochastic steps, open loop (golden model outputs fed in) and closed loop
// (the stand-in model recomputed from our own samples).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct Class {
  const char* name;  // the golden's prefix
  SchedulerKind kind;
};
const Class kClasses[] = {
    {"pndm", SchedulerKind::Pndm},   {"ddim", SchedulerKind::Ddim},
    {"lms", SchedulerKind::Lms},     {"dpmpp2m", SchedulerKind::DpmSolverPP},
    {"euler", SchedulerKind::Euler}, {"euler_a", SchedulerKind::EulerAncestral},
    {"lcm", SchedulerKind::Lcm},
};
const int kGridSteps[] = {1, 2, 3, 4, 5, 8, 25};

// Cls.from_config(tiny-sd scheduler_config.json + timestep_spacing), as the goldens were made.
std::unique_ptr<Scheduler> make(SchedulerKind kind, TimestepSpacing spacing) {
  SchedulerConfig config = SchedulerConfig::from_json(tiny_sd_scheduler_json(), kind);
  config.timestep_spacing = spacing;
  return Scheduler::create(kind, config, SchedulerSemantics::Diffusers);
}

std::string key(const Class& c, TimestepSpacing spacing, int n, const std::string& what) {
  return std::string(c.name) + "." + timestep_spacing_name(spacing) + ".n" + std::to_string(n) + "." + what;
}

bool has(const std::string& name) {
  return fast_scheduler_goldens().find(name) != nullptr;
}

Tensor golden(const std::string& name) {
  return fast_scheduler_goldens().to_f32(name);
}

TEST(FastSchedulerGoldens, GridsSigmasAndInitNoiseSigmaForEverySpacing) {
  int checked = 0;
  for (const Class& c : kClasses)
    for (TimestepSpacing spacing : kSpacings)
      for (int n : kGridSteps) {
        SCOPED_TRACE(key(c, spacing, n, ""));
        auto s = make(c.kind, spacing);
        const SchedulerState state = s->set_timesteps(n);
        const std::vector<double> ref_t = golden_numbers(fast_scheduler_goldens(), key(c, spacing, n, "timesteps"));
        EXPECT_EQ(state.timesteps, ref_t);
        ASSERT_EQ(s->num_model_calls(state), static_cast<int>(ref_t.size()));
        for (int i = 0; i < s->num_model_calls(state); ++i) EXPECT_EQ(s->model_timestep(state, i), ref_t[i]);
        if (has(key(c, spacing, n, "sigmas"))) {
          const std::vector<double> ref_s = golden_numbers(fast_scheduler_goldens(), key(c, spacing, n, "sigmas"));
          ASSERT_EQ(state.sigmas.size(), ref_s.size());
          for (size_t i = 0; i < ref_s.size(); ++i)
            EXPECT_EQ(static_cast<float>(state.sigmas[i]), static_cast<float>(ref_s[i])) << "sigmas[" << i << "]";
        }
        const double ref_init = golden_numbers(fast_scheduler_goldens(), key(c, spacing, n, "init_noise_sigma"))[0];
        EXPECT_EQ(static_cast<float>(s->init_noise_sigma(state)), static_cast<float>(ref_init));
        ++checked;
      }
  std::printf("[grids] %d (class, spacing, steps) grids equal diffusers' timesteps, sigmas and init_noise_sigma\n",
              checked);
  EXPECT_EQ(checked, 7 * 3 * 7);
}

TEST(FastSchedulerGoldens, LcmIgnoresTimestepSpacingLikeDiffusers) {
  for (int n : kGridSteps) {
    const auto lead = make(SchedulerKind::Lcm, TimestepSpacing::Leading)->set_timesteps(n).timesteps;
    EXPECT_EQ(make(SchedulerKind::Lcm, TimestepSpacing::Linspace)->set_timesteps(n).timesteps, lead);
    EXPECT_EQ(make(SchedulerKind::Lcm, TimestepSpacing::Trailing)->set_timesteps(n).timesteps, lead);
  }
  EXPECT_EQ(make(SchedulerKind::Lcm, TimestepSpacing::Leading)->set_timesteps(4).timesteps,
            (std::vector<double>{999, 759, 499, 259}));
}

// One trajectory of the goldens: (class, spacing, steps).
struct TrajectoryCase {
  Class cls;
  TimestepSpacing spacing;
  int steps;
};

void PrintTo(const TrajectoryCase& c, std::ostream* os) {
  *os << c.cls.name << " " << timestep_spacing_name(c.spacing) << " n" << c.steps;
}

std::vector<TrajectoryCase> all_runs() {
  std::vector<TrajectoryCase> runs;
  for (const Class& c : kClasses)
    for (TimestepSpacing spacing : kSpacings)
      for (int n : {1, 2, 4, 8})
        if (has(key(c, spacing, n, "samples"))) runs.push_back({c, spacing, n});
  return runs;
}

class Trajectory : public ::testing::TestWithParam<TrajectoryCase> {
 protected:
  const TrajectoryCase& run() const { return GetParam(); }
  std::string key(const std::string& what) const { return ::key(run().cls, run().spacing, run().steps, what); }
  bool stochastic() const { return has(key("noise")); }
  Tensor noise_for(const Scheduler& s, const SchedulerState& state, int k) const {
    if (!stochastic()) return Tensor();
    // Both draw fresh noise on every step but the last (Euler ancestral's last has sigma_up = 0).
    EXPECT_EQ(s.needs_noise(state, k), k != run().steps - 1) << key("needs_noise") << " step " << k;
    return row(golden(key("noise")), k);
  }
};

TEST_P(Trajectory, OpenLoop) {
  auto s = make(run().cls.kind, run().spacing);
  const Tensor pred = has(key("pred_original")) ? golden(key("pred_original")) : Tensor();
  expect_open_loop_parity(*s, s->set_timesteps(run().steps), golden(key("samples")),
                          golden(key("model_inputs")), golden(key("model_outputs")),
                          has(key("pred_original")) ? &pred : nullptr, key(""), kRel,
                          [&](const SchedulerState& state, int k) { return noise_for(*s, state, k); });
}

TEST_P(Trajectory, ClosedLoop) {
  auto s = make(run().cls.kind, run().spacing);
  expect_closed_loop_parity(*s, s->set_timesteps(run().steps), golden("initial_latent"),
                            golden(key("samples")), golden(key("model_outputs")), key(""), kRel,
                            [&](const SchedulerState& state, int k) { return noise_for(*s, state, k); });
}

std::string run_name(const ::testing::TestParamInfo<TrajectoryCase>& info) {
  return std::string(info.param.cls.name) + "_" + timestep_spacing_name(info.param.spacing) + "_n" +
         std::to_string(info.param.steps);
}

INSTANTIATE_TEST_SUITE_P(FastSchedulerGoldens, Trajectory, ::testing::ValuesIn(all_runs()), run_name);

TEST(FastSchedulerGoldens, EveryClassHasATrajectoryPerSpacing) {
  // Guards the parameter list above against a golden file that lost its trajectories.
  const std::vector<TrajectoryCase> runs = all_runs();
  for (const Class& c : kClasses)
    for (TimestepSpacing spacing : kSpacings) {
      int found = 0;
      for (const TrajectoryCase& r : runs) found += r.cls.kind == c.kind && r.spacing == spacing;
      EXPECT_GE(found, 1) << c.name << " " << timestep_spacing_name(spacing);
      if (c.kind == SchedulerKind::Lcm || c.kind == SchedulerKind::EulerAncestral) {
        EXPECT_EQ(found, 4) << c.name;
      }
    }
}

}  // namespace
