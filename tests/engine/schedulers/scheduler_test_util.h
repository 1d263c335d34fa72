// Shared helpers of the scheduler tests: the golden file, the tiny-sd config, and a per-step
// parity check for trajectories that prints one summary line.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "schedulers/scheduler.h"
#include "test_support.h"

namespace octodiff::test {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot read " << p;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The project's f32 parity bar (max abs err ≤ kRel · max(1, the reference's scale)).
inline constexpr double kRel = 1e-4;
// diffusers' three timestep_spacing values.
inline constexpr TimestepSpacing kSpacings[] = {TimestepSpacing::Leading, TimestepSpacing::Linspace,
                                                TimestepSpacing::Trailing};

inline std::string tiny_sd_scheduler_json() {
  return read_text(tiny_sd_dir() / "scheduler" / "scheduler_config.json");
}

// That file with `keys` ("\"key\": value," …) added first: what Cls.from_config(config, **keys) reads.
inline std::string tiny_sd_scheduler_json_with(const std::string& keys) {
  std::string json = tiny_sd_scheduler_json();
  json.insert(json.find('{') + 1, keys + " ");
  return json;
}

inline const SafetensorsFile& golden_file(const std::string& name) {
  static std::map<std::string, std::shared_ptr<SafetensorsFile>> files;
  auto& f = files[name];
  if (!f) f = SafetensorsFile::open(tiny_sd_dir() / "goldens" / name);
  return *f;
}
inline const SafetensorsFile& scheduler_goldens() {
  return golden_file("schedulers.safetensors");
}
// tests/data/fast-schedulers/schedulers.safetensors (tools/goldens/make_fast_scheduler_goldens.py).
inline const SafetensorsFile& fast_scheduler_goldens() {
  static std::shared_ptr<SafetensorsFile> f =
      SafetensorsFile::open(data_dir() / "fast-schedulers" / "schedulers.safetensors");
  return *f;
}

// Any numeric tensor as doubles (int64 timesteps, f32 timesteps/sigmas, f64 scalars).
inline std::vector<double> golden_numbers(const SafetensorsFile& f, const std::string& name) {
  const TensorRecord& r = f.get(name);
  if (r.dtype == DType::I64 || r.dtype == DType::I32) {
    std::vector<double> out;
    for (int64_t v : f.to_i64(r)) out.push_back(static_cast<double>(v));
    return out;
  }
  return f.to_f64(r);
}

// Row k of a stacked tensor, without the leading axis.
inline Tensor row(const Tensor& stacked, int64_t k) {
  Shape s(stacked.shape().begin() + 1, stacked.shape().end());
  return stacked.slice0(k, k + 1).reshaped(s);
}

// Every step must meet the project's parity bar (max abs err <= rel · max(1, max|ref_k|)) on
// its own; report() prints the worst step once.
class TrajectoryParity {
 public:
  explicit TrajectoryParity(std::string label, double rel = 1e-4) : label_(std::move(label)), rel_(rel) {}

  void add(int k, const Tensor& actual, const Tensor& reference) {
    ASSERT_EQ(shape_str(actual.shape()), shape_str(reference.shape())) << label_ << " step " << k;
    Diff d = diff(actual, reference);
    const double tol = rel_ * std::max(1.0, d.ref_scale);
    EXPECT_LE(d.max_abs, tol) << label_ << ": step " << k << " worst element " << d.worst_index;
    ++steps_;
    if (d.max_abs >= max_abs_) {
      max_abs_ = d.max_abs;
      max_step_ = k;
      max_tol_ = tol;
    }
    worst_ratio_ = std::max(worst_ratio_, d.max_abs / tol);
  }

  void report() const {
    std::printf(
        "[parity] %-40s %2d steps  max_abs_err=%.3e (step %d, tol there %.3e)  worst err/tol=%.3f  "
        "rel=%.0e\n",
        label_.c_str(), steps_, max_abs_, max_step_, max_tol_, worst_ratio_, rel_);
    std::fflush(stdout);
  }

 private:
  std::string label_;
  double rel_;
  int steps_ = 0;
  double max_abs_ = 0, max_tol_ = 0, worst_ratio_ = 0;
  int max_step_ = -1;
};

// The goldens' stand-in UNet: model_input·0.1f + (float)(0.01·cos(t/100)), t the timestep as the
// scheduler stores it. Two torch ops (multiply, then add): GCC must not fuse them.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
inline Tensor stand_in_model(const Tensor& model_input, double t) {
  const float offset = static_cast<float>(0.01 * std::cos(t / 100));
  Tensor out = Tensor::empty(model_input.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out[i] = model_input[i] * 0.1f + offset;
  return out;
}
#pragma GCC pop_options

// Step k's noise in a trajectory (an undefined Tensor where the step takes none).
using TrajectoryNoise = std::function<Tensor(const SchedulerState& state, int k)>;

// Open loop: every step fed the goldens' sample and model output (stacked, row k per step; samples
// has one row more); scale_model_input, prev_sample and — when `pred` is given —
// pred_original_sample against the goldens', at the parity bar `rel`; prints each once.
inline void expect_open_loop_parity(const Scheduler& s, SchedulerState state, const Tensor& samples,
                                    const Tensor& inputs, const Tensor& outputs, const Tensor* pred,
                                    const std::string& label, double rel, const TrajectoryNoise& noise = {}) {
  TrajectoryParity p_in(label + " model_inputs", rel), p_out(label + " samples", rel),
      p_x0(label + " pred_original", rel);
  for (int k = 0; k < s.num_model_calls(state); ++k) {
    const Tensor x = row(samples, k), m = row(outputs, k);
    p_in.add(k, s.scale_model_input(state, x, k), row(inputs, k));
    StepResult r = s.step(state, m, k, x, noise ? noise(state, k) : Tensor());
    p_out.add(k, r.prev_sample, row(samples, k + 1));
    if (pred) p_x0.add(k, r.pred_original_sample, row(*pred, k));
    state = std::move(r.state);
  }
  p_in.report();
  p_out.report();
  if (pred) p_x0.report();
}

// Closed loop: from initial·init_noise_sigma, the stand-in model recomputed from the scheduler's own
// samples; its outputs and the samples against the goldens' at the parity bar `rel`.
inline void expect_closed_loop_parity(const Scheduler& s, SchedulerState state, const Tensor& initial,
                                      const Tensor& samples, const Tensor& outputs, const std::string& label,
                                      double rel, const TrajectoryNoise& noise = {}) {
  const float init_sigma = static_cast<float>(s.init_noise_sigma(state));
  Tensor x = Tensor::empty(initial.shape());
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = initial[i] * init_sigma;
  expect_parity(label + " closed samples[0]", x, row(samples, 0), rel);
  TrajectoryParity p_m(label + " closed model_outputs", rel), p_x(label + " closed samples", rel);
  for (int k = 0; k < s.num_model_calls(state); ++k) {
    const Tensor m = stand_in_model(s.scale_model_input(state, x, k), s.model_timestep(state, k));
    p_m.add(k, m, row(outputs, k));
    StepResult r = s.step(state, m, k, x, noise ? noise(state, k) : Tensor());
    x = r.prev_sample;
    p_x.add(k, x, row(samples, k + 1));
    state = std::move(r.state);
  }
  p_m.report();
  p_x.report();
}

// dummy_sample_deter of diffusers' scheduler tests: arange(768)/768 in f32, as (4, 3, 8, 8) (layout
// and transposes do not matter: the full loops are element-wise and only sum/mean of |x| are checked).
inline Tensor deterministic_sample() {
  Tensor x = Tensor::empty({4, 3, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>(i) / 768.0f;
  return x;
}

// sum|x| within 1e-2 of `sum` (unless it is NaN: a reference that gives the mean only) and mean|x|
// within 1e-3 of `mean`, both printed after `tag` ("torch-vector", "flax-vector").
inline void expect_sum_mean(const char* tag, const std::string& label, const Tensor& x, double sum, double mean) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  std::printf("[%s] %-46s sum|x|=%.4f (ref %.4f, diff %.1e)  mean|x|=%.6g (ref %.6g)\n", tag, label.c_str(), s, sum,
              std::fabs(s - sum), s / x.numel(), mean);
  if (!std::isnan(sum)) {
    EXPECT_NEAR(s, sum, 1e-2) << label;
  }
  EXPECT_NEAR(s / x.numel(), mean, 1e-3) << label;
}

}  // namespace octodiff::test
