// LCM, Euler ancestral and every timestep_spacing of every scheduler against diffusers 0.31
// (tests/data/fast-schedulers, made by tools/goldens/make_fast_scheduler_goldens.py): grids,
// sigmas and init_noise_sigma for 1-25 steps, and whole trajectories with diffusers' own noise
// injected into the stochastic steps, open loop (golden model outputs fed in) and closed loop
// (the stand-in model recomputed from our own samples).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "scheduler_test_util.h"

// The stand-in model is two torch ops (multiply, then add): keep GCC from fusing them.
#pragma GCC optimize("fp-contract=off")

using namespace octodiff;
using namespace octodiff::test;

namespace {

struct Class {
  const char* name;  // the golden's prefix
  SchedulerKind kind;
};
const Class kClasses[] = {
    {"pndm", SchedulerKind::Pndm},   {"ddim", SchedulerKind::Ddim},     {"lms", SchedulerKind::Lms},
    {"dpmpp2m", SchedulerKind::DpmSolverPP}, {"euler", SchedulerKind::Euler},
    {"euler_a", SchedulerKind::EulerAncestral}, {"lcm", SchedulerKind::Lcm},
};
const TimestepSpacing kSpacings[] = {TimestepSpacing::Leading, TimestepSpacing::Linspace, TimestepSpacing::Trailing};
const int kGridSteps[] = {1, 2, 3, 4, 5, 8, 25};
constexpr double kRel = 1e-4;  // the project's f32 bar

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

// The goldens' stand-in UNet: model_input·0.1f + (float)(0.01·cos(t/100)).
Tensor stand_in_model(const Tensor& model_input, double t) {
  const float offset = static_cast<float>(0.01 * std::cos(t / 100));
  Tensor out = Tensor::empty(model_input.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out[i] = model_input[i] * 0.1f + offset;
  return out;
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
  SchedulerState state = s->set_timesteps(run().steps);
  const Tensor samples = golden(key("samples")), inputs = golden(key("model_inputs")),
               outputs = golden(key("model_outputs"));
  const bool has_pred = has(key("pred_original"));
  const Tensor pred = has_pred ? golden(key("pred_original")) : Tensor();
  TrajectoryParity p_in(key("model_inputs"), kRel), p_out(key("samples"), kRel), p_x0(key("pred_original"), kRel);
  for (int k = 0; k < s->num_model_calls(state); ++k) {
    const Tensor x = row(samples, k), m = row(outputs, k);
    p_in.add(k, s->scale_model_input(state, x, k), row(inputs, k));
    StepResult r = s->step(state, m, k, x, noise_for(*s, state, k));
    p_out.add(k, r.prev_sample, row(samples, k + 1));
    if (has_pred) p_x0.add(k, r.pred_original_sample, row(pred, k));
    state = std::move(r.state);
  }
  p_in.report();
  p_out.report();
  if (has_pred) p_x0.report();
}

TEST_P(Trajectory, ClosedLoop) {
  auto s = make(run().cls.kind, run().spacing);
  SchedulerState state = s->set_timesteps(run().steps);
  const Tensor samples = golden(key("samples")), outputs = golden(key("model_outputs"));
  const Tensor initial = golden("initial_latent");
  const float init_sigma = static_cast<float>(s->init_noise_sigma(state));
  Tensor x = Tensor::empty(initial.shape());
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = initial[i] * init_sigma;
  expect_parity(key("closed samples[0]"), x, row(samples, 0), kRel);
  TrajectoryParity p_m(key("closed model_outputs"), kRel), p_x(key("closed samples"), kRel);
  for (int k = 0; k < s->num_model_calls(state); ++k) {
    const Tensor m = stand_in_model(s->scale_model_input(state, x, k), s->model_timestep(state, k));
    p_m.add(k, m, row(outputs, k));
    StepResult r = s->step(state, m, k, x, noise_for(*s, state, k));
    x = r.prev_sample;
    p_x.add(k, x, row(samples, k + 1));
    state = std::move(r.state);
  }
  p_m.report();
  p_x.report();
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
