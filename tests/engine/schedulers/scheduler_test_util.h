// Shared helpers of the scheduler tests: the golden file, the tiny-sd config, and a per-step
// parity check for trajectories that prints one summary line.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

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

inline std::string tiny_sd_scheduler_json() {
  return read_text(tiny_sd_dir() / "scheduler" / "scheduler_config.json");
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
