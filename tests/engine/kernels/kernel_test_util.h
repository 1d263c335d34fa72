// Helpers for the kernel tests: every ISA path this CPU can run, random data, error measures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/device.h"
#include "kernels/isa.h"

namespace octodiff::kernels::test {

inline std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::Generic, Isa::Avx2, Isa::Avx512})
    if (static_cast<int>(i) <= static_cast<int>(best_isa())) out.push_back(i);
  return out;
}

// The bf16 product paths: each ISA, and on AVX-512 with and without VDPBF16PS.
struct Path {
  Isa isa;
  bool dot;  // VDPBF16PS allowed
  std::string name() const { return isa_name(isa) + (isa == Isa::Avx512 ? (dot ? "+bf16" : "-widen") : ""); }
};

inline std::vector<Path> bf16_paths() {
  std::vector<Path> out;
  for (Isa isa : available_isas()) {
    out.push_back({isa, false});
    if (isa == Isa::Avx512 && has_avx512_bf16()) out.push_back({isa, true});
  }
  return out;
}

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Max |a − ref| over max(|ref|, floor): the error relative to the magnitude of the result.
inline double rel_error(const float* a, const std::vector<double>& ref, double floor = 1e-6) {
  double max_err = 0, max_ref = floor;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::abs(static_cast<double>(a[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(ref[i]));
    if (std::isnan(a[i])) return INFINITY;
  }
  return max_err / max_ref;
}

// Runs fn under 1, 2 and 3 threads and checks the outputs are bit-identical.
inline void expect_thread_invariant(const std::string& label, const std::function<std::vector<float>()>& fn) {
  std::vector<float> base;
  for (int threads : {1, 2, 3}) {
    DeviceContext ctx;
    ctx.threads = threads;
    DeviceScope scope(ctx);
    std::vector<float> r = fn();
    if (threads == 1) {
      base = r;
      continue;
    }
    ASSERT_EQ(r.size(), base.size());
    EXPECT_EQ(0, std::memcmp(r.data(), base.data(), r.size() * sizeof(float)))
        << label << ": result differs between 1 and " << threads << " threads";
  }
}

}  // namespace octodiff::kernels::test
