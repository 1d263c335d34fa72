// Shared helpers for the engine tests: where the data is, and how parity is measured.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/single_file.h"

namespace octodiff::test {

// `f` throws octodiff::Error whose message mentions `needle` (printed, so a log shows the words).
inline void expect_error_mentioning(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// tests/data in the source tree (copied reference data; always present).
std::filesystem::path data_dir();
// tests/data/tiny-sd
std::filesystem::path tiny_sd_dir();
// A fresh empty directory for this test's outputs (removed at the next run), under a folder of
// the running gtest test's own (suite.name), so tests in parallel processes never share one.
std::filesystem::path temp_dir(const std::string& name);
// A copy of tests/data/tiny-sd (without its goldens) under temp_dir(name) whose
// scheduler/scheduler_config.json holds `scheduler_json`; returns the model folder.
std::filesystem::path tiny_sd_with_scheduler(const std::string& name, const std::string& scheduler_json);
// The names and shapes of the tensors in a .safetensors file, in the file's order.
std::vector<NamedShape> tensor_shapes_of(const std::filesystem::path& file);
// A golden's name as a gtest parameter name ('.' is not allowed there: "pndm_s0.5" → "pndm_s0_5").
std::string param_name(std::string golden);

struct Diff {
  double max_abs = 0;       // max |a - b|
  double ref_scale = 0;     // max |b|
  int64_t worst_index = -1;
  bool shapes_match = true;
};

Diff diff(const float* actual, const float* reference, int64_t n);
Diff diff(const Tensor& actual, const Tensor& reference);

// The project's parity bar: max abs error <= rel * max(1, max|reference|). Prints the error
// (always, so the test log shows it) and fails the test when it is over.
void expect_parity(const std::string& label, const Tensor& actual, const Tensor& reference,
                   double rel = 1e-4);
// Absolute tolerance variant (e.g. pipeline images within 1e-3).
void expect_close_abs(const std::string& label, const Tensor& actual, const Tensor& reference,
                      double abs_tol);

}  // namespace octodiff::test
