// Flax semantics: the deterministic vectors of the removed diffusers Flax scheduler tests
// (spec/schedulers.md §8), the Flax timestep grids (§2), and how Flax-driven runs relate to the
// torch goldens (identical where the algorithms agree, different exactly where Flax differs).
#include <cmath>

#include "core/error.h"
#include "scheduler_test_util.h"

using namespace octodiff;
using namespace octodiff::test;

namespace {

constexpr auto kFlax = SchedulerSemantics::Flax;

SchedulerConfig sd_config(SchedulerKind kind) {
  return SchedulerConfig::from_json(tiny_sd_scheduler_json(), kind);
}

std::unique_ptr<Scheduler> flax(SchedulerKind kind, const SchedulerConfig& config) {
  return Scheduler::create(kind, config, kFlax);
}

std::vector<double> as_doubles(std::initializer_list<int> v) {
  return std::vector<double>(v.begin(), v.end());
}

// ---- §8: full loops of the diffusers Flax tests ------------------------------------------------

// Runs the scheduler's whole timestep list with the dummy model m(x, t) = x·t/(t + 1).
Tensor full_loop(SchedulerKind kind, double beta_start, bool set_alpha_to_one) {
  SchedulerConfig c = SchedulerConfig::defaults(kind);
  c.beta_start = beta_start;
  c.set_alpha_to_one = set_alpha_to_one;
  auto s = flax(kind, c);
  SchedulerState state = s->set_timesteps(10);
  Tensor x = deterministic_sample();
  for (int i = 0; i < static_cast<int>(state.timesteps.size()); ++i) {
    const int t = static_cast<int>(state.timesteps[i]);
    Tensor m = Tensor::empty(x.shape());
    for (int64_t k = 0; k < x.numel(); ++k) m[k] = x[k] * static_cast<float>(t) / static_cast<float>(t + 1);
    StepResult r = s->step(state, m, i, x);
    x = r.prev_sample;
    state = std::move(r.state);
  }
  return x;
}

void expect_sum_mean(const std::string& label, const Tensor& x, double sum, double mean) {
  test::expect_sum_mean("flax-vector", label, x, sum, mean);
}

TEST(FlaxVectors, Ddim) {
  SchedulerConfig defaults = SchedulerConfig::defaults(SchedulerKind::Ddim);
  ASSERT_TRUE(defaults.clip_sample && defaults.set_alpha_to_one);
  expect_sum_mean("DDIM defaults", full_loop(SchedulerKind::Ddim, 0.0001, true), 172.0067, 0.223967);
  expect_sum_mean("DDIM beta_start 0.01 set_alpha_to_one", full_loop(SchedulerKind::Ddim, 0.01, true),
                  149.8295, 0.1951);
  expect_sum_mean("DDIM beta_start 0.01 !set_alpha_to_one", full_loop(SchedulerKind::Ddim, 0.01, false),
                  149.0784, 0.1941);
}

TEST(FlaxVectors, PndmWithRungeKuttaWarmup) {
  ASSERT_FALSE(SchedulerConfig::defaults(SchedulerKind::Pndm).skip_prk_steps);
  expect_sum_mean("PNDM defaults (PRK + PLMS)", full_loop(SchedulerKind::Pndm, 0.0001, false), 198.1318,
                  0.2580);
  expect_sum_mean("PNDM beta_start 0.01 set_alpha_to_one", full_loop(SchedulerKind::Pndm, 0.01, true),
                  186.9466, 0.24342);
  expect_sum_mean("PNDM beta_start 0.01 !set_alpha_to_one", full_loop(SchedulerKind::Pndm, 0.01, false),
                  186.9482, 0.2434);
}

// ---- §2: grids ---------------------------------------------------------------------------------

TEST(FlaxGrids, PndmSd50StepsRunsNCallsAndStopsAtT1) {
  auto s = flax(SchedulerKind::Pndm, sd_config(SchedulerKind::Pndm));
  SchedulerState state = s->set_timesteps(50);
  std::vector<double> expected = {981, 961, 961};
  for (int t = 941; t >= 1; t -= 20) expected.push_back(t);
  EXPECT_EQ(state.timesteps, expected);  // 51 entries, the second-largest repeated
  ASSERT_EQ(s->num_model_calls(state), 50);
  EXPECT_EQ(s->model_timestep(state, 0), 981);
  EXPECT_EQ(s->model_timestep(state, 2), 961);
  EXPECT_EQ(s->model_timestep(state, 49), 21);  // the last UNet call; its step lands on t = 1
  // Diffusers semantics runs the full list (N + 1 calls).
  auto torch =
      Scheduler::create(SchedulerKind::Pndm, sd_config(SchedulerKind::Pndm), SchedulerSemantics::Diffusers);
  EXPECT_EQ(torch->num_model_calls(torch->set_timesteps(50)), 51);
}

TEST(FlaxGrids, PndmAndDdimWithStepsOffset) {
  SchedulerConfig c = SchedulerConfig::defaults(SchedulerKind::Pndm);
  c.steps_offset = 1;
  EXPECT_EQ(flax(SchedulerKind::Pndm, c)->set_timesteps(10).timesteps,
            as_doubles({901, 851, 851, 801, 801, 751, 751, 701, 701, 651, 651, 601, 601, 501, 401, 301, 201,
                        101, 1}));
  SchedulerConfig d = SchedulerConfig::defaults(SchedulerKind::Ddim);
  d.steps_offset = 1;
  EXPECT_EQ(flax(SchedulerKind::Ddim, d)->set_timesteps(5).timesteps, as_doubles({801, 601, 401, 201, 1}));
  // Flax PNDM/DDIM have no timestep_spacing option: always "leading".
  d.timestep_spacing = TimestepSpacing::Linspace;
  EXPECT_EQ(flax(SchedulerKind::Ddim, d)->set_timesteps(5).timesteps, as_doubles({801, 601, 401, 201, 1}));
}

TEST(FlaxGrids, DpmSolverSpacings) {
  SchedulerConfig c = sd_config(SchedulerKind::DpmSolverPP);
  ASSERT_EQ(c.timestep_spacing, TimestepSpacing::Linspace);
  EXPECT_EQ(flax(SchedulerKind::DpmSolverPP, c)->set_timesteps(25).timesteps,
            as_doubles({999, 959, 919, 879, 839, 799, 759, 719, 679, 639, 599, 559, 519,
                        480, 440, 400, 360, 320, 280, 240, 200, 160, 120, 80,  40}));
  EXPECT_EQ(flax(SchedulerKind::DpmSolverPP, c)->set_timesteps(20).timesteps,
            as_doubles({999, 949, 899, 849, 799, 749, 699, 649, 599, 549,
                        500, 450, 400, 350, 300, 250, 200, 150, 100, 50}));
  c.timestep_spacing = TimestepSpacing::Leading;  // ratio 1000 // 26 = 38, + steps_offset 1
  std::vector<double> leading;
  for (int k = 25; k >= 1; --k) leading.push_back(k * 38 + 1);
  EXPECT_EQ(flax(SchedulerKind::DpmSolverPP, c)->set_timesteps(25).timesteps, leading);
  EXPECT_EQ(leading.front(), 951);
  EXPECT_EQ(leading.back(), 39);
  c.timestep_spacing = TimestepSpacing::Trailing;
  std::vector<double> trailing;
  for (int k = 0; k < 25; ++k) trailing.push_back(999 - 40 * k);
  EXPECT_EQ(flax(SchedulerKind::DpmSolverPP, c)->set_timesteps(25).timesteps, trailing);
}

TEST(FlaxGrids, LmsTruncatesTimestepsAndUsesMaxTrainingSigma) {
  auto s = flax(SchedulerKind::Lms, sd_config(SchedulerKind::Lms));
  SchedulerState state = s->set_timesteps(50);
  ASSERT_EQ(state.timesteps.size(), 50u);
  EXPECT_EQ(std::vector<double>(state.timesteps.begin(), state.timesteps.begin() + 4),
            as_doubles({999, 978, 958, 937}));
  EXPECT_EQ(state.timesteps.back(), 0);
  EXPECT_EQ(s->model_timestep(state, 1), 978);
  // Read before set_timesteps by the pipeline: the largest training sigma, whatever the grid.
  EXPECT_NEAR(s->init_noise_sigma(state), 14.614641, 14.614641 * 1e-5);
  EXPECT_NEAR(s->init_noise_sigma(s->set_timesteps(5)), 14.614641, 14.614641 * 1e-5);
}

TEST(FlaxGrids, EulerGridsAndInitNoiseSigma) {
  SchedulerConfig c = sd_config(SchedulerKind::Euler);
  auto lin = flax(SchedulerKind::Euler, c);
  SchedulerState state = lin->set_timesteps(50);
  EXPECT_EQ(state.timesteps[0], 999.0);
  EXPECT_NEAR(state.timesteps[1], 978.6122, 1e-3);
  EXPECT_EQ(state.timesteps.back(), 0.0);
  EXPECT_NEAR(lin->init_noise_sigma(state), 14.614641, 14.614641 * 1e-5);
  c.timestep_spacing = TimestepSpacing::Leading;
  c.steps_offset = 0;  // the Flax class adds 1 regardless of steps_offset
  auto lead = flax(SchedulerKind::Euler, c);
  EXPECT_EQ(lead->set_timesteps(5).timesteps, as_doubles({801, 601, 401, 201, 1}));
  EXPECT_NEAR(lead->init_noise_sigma(lead->set_timesteps(5)), 14.648814, 14.648814 * 1e-5);
}

// ---- Flax runs against the torch goldens -------------------------------------------------------

struct Golden {
  std::string prefix;
  Tensor samples, outputs;
  explicit Golden(const std::string& p)
      : prefix(p),
        samples(scheduler_goldens().to_f32(p + ".samples")),
        outputs(scheduler_goldens().to_f32(p + ".model_outputs")) {}
};

// Open loop under Flax semantics on the stored torch model outputs: returns step results.
std::vector<Tensor> flax_open_loop(const Scheduler& s, const Golden& g, int n, int calls) {
  SchedulerState state = s.set_timesteps(n);
  std::vector<Tensor> out;
  for (int k = 0; k < calls; ++k) {
    StepResult r = s.step(state, row(g.outputs, k), k, row(g.samples, k));
    out.push_back(r.prev_sample);
    state = std::move(r.state);
  }
  return out;
}

TEST(FlaxVsTorch, PndmMatchesTheFirstNCalls) {
  for (int n : {5, 20}) {
    auto s = flax(SchedulerKind::Pndm, sd_config(SchedulerKind::Pndm));
    const int calls = s->num_model_calls(s->set_timesteps(n));
    ASSERT_EQ(calls, n);
    Golden g("pndm.n" + std::to_string(n));
    ASSERT_EQ(g.outputs.dim(0), n + 1);  // torch made one call more
    TrajectoryParity p(g.prefix + " flax vs torch", 1e-4);
    auto out = flax_open_loop(*s, g, n, calls);
    for (int k = 0; k < calls; ++k) p.add(k, out[k], row(g.samples, k + 1));
    p.report();
  }
}

TEST(FlaxVsTorch, PndmClampsThePreviousTimestep) {
  // With steps_offset 0 the list ends at t = 0 and PLMS's t_prev = −r: Flax clamps it to 0
  // (so a' = a and the step returns its sample), torch uses final_alpha_cumprod (1 here).
  SchedulerConfig c = sd_config(SchedulerKind::Pndm);
  c.steps_offset = 0;
  c.set_alpha_to_one = true;
  Tensor x = Tensor::full({1, 4, 2, 2}, 0.5f), e = Tensor::full({1, 4, 2, 2}, 0.25f);
  for (auto semantics : {SchedulerSemantics::Flax, SchedulerSemantics::Diffusers}) {
    auto s = Scheduler::create(SchedulerKind::Pndm, c, semantics);
    SchedulerState state = s->set_timesteps(5);
    ASSERT_EQ(state.timesteps.back(), 0);
    Tensor cur = x;
    for (int i = 0; i < static_cast<int>(state.timesteps.size()); ++i) {
      StepResult r = s->step(state, e, i, cur);
      if (i + 1 == static_cast<int>(state.timesteps.size())) {
        if (semantics == SchedulerSemantics::Flax) {
          for (int64_t k = 0; k < cur.numel(); ++k) EXPECT_EQ(r.prev_sample[k], cur[k]);
        } else {
          EXPECT_GT(std::fabs(r.prev_sample[0] - cur[0]), 1e-3);
        }
      }
      cur = r.prev_sample;
      state = std::move(r.state);
    }
  }
}

// The Flax scheduler `kind` with `config`, open loop on the torch golden "<golden>.n<N>" (N = 5 and
// 20), matches torch's samples at every step.
void expect_flax_trajectory_matches_torch(SchedulerKind kind, const SchedulerConfig& config,
                                          const std::string& golden) {
  for (int n : {5, 20}) {
    auto s = flax(kind, config);
    Golden g(golden + ".n" + std::to_string(n));
    TrajectoryParity p(g.prefix + " flax vs torch", 1e-4);
    auto out = flax_open_loop(*s, g, n, n);
    for (int k = 0; k < n; ++k) p.add(k, out[k], row(g.samples, k + 1));
    p.report();
  }
}

TEST(FlaxVsTorch, DdimMatches) {
  expect_flax_trajectory_matches_torch(SchedulerKind::Ddim, sd_config(SchedulerKind::Ddim), "ddim");
}

TEST(FlaxVsTorch, DpmSolverStepsToTrainingTimestepZero) {
  for (int n : {5, 20}) {
    auto s = flax(SchedulerKind::DpmSolverPP, sd_config(SchedulerKind::DpmSolverPP));
    Golden g("dpmpp2m.n" + std::to_string(n));
    auto out = flax_open_loop(*s, g, n, n);
    // Timestep and sigma space agree on the integer grid, so all but the last step match.
    TrajectoryParity p(g.prefix + " flax vs torch, steps 0..N-2", 1e-4);
    for (int k = 0; k + 1 < n; ++k) p.add(k, out[k], row(g.samples, k + 1));
    p.report();
    // torch's last step lands on sigma 0 (= its x0 prediction); Flax's on training t = 0.
    const Tensor torch_final = row(g.samples, n), flax_final = out[n - 1];
    const double gap = diff(flax_final, torch_final).max_abs;
    std::printf("[flax-vs-torch] %s last step: |flax - torch| = %.3e (expected to differ)\n",
                g.prefix.c_str(), gap);
    EXPECT_GT(gap, 1e-3);
    if (n < 15) {
      // First order (lower_order_final, N < 15) = DDIM to t = 0: sqrt(ā_0)·x0 + sqrt(1 − ā_0)·eps.
      const float a0 = s->alphas_cumprod()[0];
      const float ca = std::sqrt(a0), cs = std::sqrt(1.0f - a0);
      const Tensor eps = row(g.outputs, n - 1);
      Tensor expected = Tensor::empty(torch_final.shape());
      for (int64_t k = 0; k < expected.numel(); ++k) expected[k] = ca * torch_final[k] + cs * eps[k];
      expect_parity(g.prefix + " flax last step = DDIM to t=0", flax_final, expected, 1e-4);
    }
  }
}

TEST(FlaxVsTorch, LmsOnTheFlaxGrid) {
  // Same algorithm; Flax's f32 sigma interpolation differs from np.interp by rounding only.
  expect_flax_trajectory_matches_torch(SchedulerKind::Lms, sd_config(SchedulerKind::Lms), "lms");
}

TEST(FlaxVsTorch, EulerLeadingMatches) {
  SchedulerConfig c = sd_config(SchedulerKind::Euler);
  c.timestep_spacing = TimestepSpacing::Leading;
  expect_flax_trajectory_matches_torch(SchedulerKind::Euler, c, "euler_leading");
}

TEST(FlaxVsTorch, EulerLinspaceFallsBackToIndexZero) {
  // Flax pipeline behaviour reproduced on purpose: int32(749.25) = 749 is not in the float grid,
  // so the lookup yields index 0 and the step repeats the first interval sigma_0 -> sigma_1.
  auto s = flax(SchedulerKind::Euler, sd_config(SchedulerKind::Euler));
  SchedulerState state = s->set_timesteps(5);
  EXPECT_EQ(state.timesteps, std::vector<double>({999, 749.25, 499.5, 249.75, 0}));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(s->model_timestep(state, i), (std::vector<double>{999, 749, 499, 249, 0})[i]);
  const float s0 = static_cast<float>(state.sigmas[0]), s1 = static_cast<float>(state.sigmas[1]);
  const float s4 = static_cast<float>(state.sigmas[4]);
  EXPECT_GT(s4, 0.029f);
  EXPECT_LT(s4, 0.0292f);  // sigma at training t = 0
  Golden g("euler.n5");
  for (int k = 0; k < 5; ++k) {
    const Tensor x = row(g.samples, k), m = row(g.outputs, k);
    // scale_model_input and step both use sigma_0 for the non-integer timesteps.
    const float sigma = (k == 0 || k == 4) ? static_cast<float>(state.sigmas[k]) : s0;
    const float next = k == 4 ? 0.0f : s1;
    const Tensor scaled = s->scale_model_input(state, x, k);
    StepResult r = s->step(state, m, k, x);
    Tensor expected_in = Tensor::empty(x.shape()), expected = Tensor::empty(x.shape());
    for (int64_t j = 0; j < x.numel(); ++j) {
      expected_in[j] = x[j] / std::sqrt(sigma * sigma + 1.0f);
      const float x0 = x[j] - sigma * m[j];
      expected[j] = x[j] + (x[j] - x0) / sigma * (next - sigma);
    }
    // Up to rounding (this file may be compiled with a·b + c fused); a wrong sigma index would
    // be off by whole units.
    EXPECT_LE(diff(scaled, expected_in).max_abs, 1e-6 * 30) << "step " << k;
    EXPECT_LE(diff(r.prev_sample, expected).max_abs, 1e-6 * 30) << "step " << k;
    // Steps 0 and 4 (integral timesteps) agree with torch; 1..3 do not.
    if (k == 0 || k == 4) {
      expect_parity("euler.n5 flax vs torch step " + std::to_string(k), r.prev_sample, row(g.samples, k + 1));
    } else {
      const double gap = diff(r.prev_sample, row(g.samples, k + 1)).max_abs;
      std::printf("[flax-vs-torch] euler.n5 step %d: |flax - torch| = %.3e (expected to differ)\n", k, gap);
      EXPECT_GT(gap, 1e-2);
    }
    state = std::move(r.state);
  }
}

}  // namespace

// SD-Turbo-style models ask for Euler with trailing spacing, which FlaxEulerDiscreteScheduler
// lacks: under Flax semantics Octodiff takes the torch class's trailing timesteps (and keeps the
// Flax sigma interpolation), so such a model runs in the default compat mode.
TEST(FlaxEulerTrailing, TakesTheTorchTrailingTimesteps) {
  SchedulerConfig config = SchedulerConfig::defaults(SchedulerKind::Euler);
  config.beta_schedule = "scaled_linear";
  config.beta_start = 0.00085;
  config.beta_end = 0.012;
  config.steps_offset = 1;
  config.timestep_spacing = TimestepSpacing::Trailing;
  const auto flax = Scheduler::create(SchedulerKind::Euler, config, SchedulerSemantics::Flax);
  const auto torch = Scheduler::create(SchedulerKind::Euler, config, SchedulerSemantics::Diffusers);
  for (int n : {1, 2, 4, 8}) {
    const SchedulerState f = flax->set_timesteps(n), t = torch->set_timesteps(n);
    ASSERT_EQ(f.timesteps.size(), t.timesteps.size()) << n;
    for (size_t i = 0; i < f.timesteps.size(); ++i) EXPECT_EQ(f.timesteps[i], t.timesteps[i]) << n << " " << i;
    EXPECT_EQ(f.timesteps.front(), 999.0) << "the first step starts at the last training timestep";
    for (size_t i = 0; i < f.timesteps.size(); ++i)
      EXPECT_NEAR(f.sigmas[i], t.sigmas[i], 1e-5 * t.sigmas[i]) << n << " " << i;
  }
}
