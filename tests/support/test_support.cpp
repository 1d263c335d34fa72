#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "io/weight_source.h"

namespace octodiff::test {

std::filesystem::path data_dir() { return OCTODIFF_TEST_DATA_DIR; }
std::filesystem::path tiny_sd_dir() { return data_dir() / "tiny-sd"; }

std::filesystem::path temp_dir(const std::string& name) {
  // Under the running test's own folder: ctest runs tests in parallel processes, and two tests
  // asking for the same name must not empty each other's folder.
  std::filesystem::path dir = OCTODIFF_TEST_TMP_DIR;
  if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info())
    dir /= std::string(test->test_suite_name()) + "." + test->name();
  dir /= name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path tiny_sd_with_scheduler(const std::string& name, const std::string& scheduler_json) {
  const std::filesystem::path dir = temp_dir(name) / "model";
  std::filesystem::copy(tiny_sd_dir(), dir, std::filesystem::copy_options::recursive);
  std::filesystem::remove_all(dir / "goldens");
  std::ofstream(dir / "scheduler" / "scheduler_config.json", std::ios::trunc) << scheduler_json;
  return dir;
}

Diff diff(const float* actual, const float* reference, int64_t n) {
  Diff d;
  for (int64_t i = 0; i < n; ++i) {
    double ref = reference[i];
    double err = std::fabs(static_cast<double>(actual[i]) - ref);
    if (std::isnan(actual[i]) != std::isnan(reference[i])) err = INFINITY;
    if (err > d.max_abs || (d.worst_index < 0 && std::isinf(err))) {
      d.max_abs = err;
      d.worst_index = i;
    }
    d.ref_scale = std::max(d.ref_scale, std::fabs(ref));
  }
  return d;
}

Diff diff(const Tensor& actual, const Tensor& reference) {
  if (actual.shape() != reference.shape()) {
    Diff d;
    d.shapes_match = false;
    return d;
  }
  return diff(actual.data(), reference.data(), actual.numel());
}

void expect_parity(const std::string& label, const Tensor& actual, const Tensor& reference, double rel) {
  ASSERT_EQ(shape_str(actual.shape()), shape_str(reference.shape())) << label << ": shape mismatch";
  Diff d = diff(actual, reference);
  double tol = rel * std::max(1.0, d.ref_scale);
  std::printf("[parity] %-48s max_abs_err=%.3e  max|ref|=%.3e  tol=%.3e  %s\n", label.c_str(), d.max_abs,
              d.ref_scale, tol, d.max_abs <= tol ? "ok" : "FAIL");
  std::fflush(stdout);
  EXPECT_LE(d.max_abs, tol) << label << ": worst element " << d.worst_index << " actual "
                            << actual[d.worst_index] << " reference " << reference[d.worst_index];
}

void expect_close_abs(const std::string& label, const Tensor& actual, const Tensor& reference,
                      double abs_tol) {
  ASSERT_EQ(shape_str(actual.shape()), shape_str(reference.shape())) << label << ": shape mismatch";
  Diff d = diff(actual, reference);
  std::printf("[parity] %-48s max_abs_err=%.3e  max|ref|=%.3e  tol=%.3e (abs)  %s\n", label.c_str(),
              d.max_abs, d.ref_scale, abs_tol, d.max_abs <= abs_tol ? "ok" : "FAIL");
  std::fflush(stdout);
  EXPECT_LE(d.max_abs, abs_tol) << label << ": worst element " << d.worst_index << " actual "
                                << actual[d.worst_index] << " reference " << reference[d.worst_index];
}

std::vector<NamedShape> tensor_shapes_of(const std::filesystem::path& file) {
  auto w = weights_from_safetensors({file}, file.string());
  std::vector<NamedShape> out;
  for (const auto& name : w->names()) out.push_back({name, w->shape_of(name)});
  return out;
}

std::string param_name(std::string golden) {
  for (char& ch : golden)
    if (ch == '.') ch = '_';
  return golden;
}

}  // namespace octodiff::test
