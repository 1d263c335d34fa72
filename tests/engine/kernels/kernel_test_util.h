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
#include "kernels/conv2d.h"
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

// C = A·B (+ bias[j] on every row, + residual) in double: A is M × K with row stride lda, B is
// K × N row-major, the residual M × N with row stride ldr.
inline std::vector<double> reference_gemm(const std::vector<float>& a, int64_t lda,
                                          const std::vector<float>& b, int64_t M, int64_t N, int64_t K,
                                          const float* bias = nullptr, const float* residual = nullptr,
                                          int64_t ldr = 0) {
  std::vector<double> c(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(a[i * lda + k]) * b[k * N + j];
      if (bias) s += bias[j];
      if (residual) s += residual[i * ldr + j];
      c[i * N + j] = s;
    }
  return c;
}

// The convolution of an NHWC input (N × H × W × Ci) with an OIHW weight (Co × Ci × k × k) in
// double, plus bias[co] and an NHWC residual shaped like the output (N × Ho × Wo × Co).
inline std::vector<double> reference_conv2d(const std::vector<float>& x, const std::vector<float>& w,
                                            int64_t N, int64_t H, int64_t W, int64_t Ci, int64_t Co, int k,
                                            const Conv2dGeometry& g, const float* bias = nullptr,
                                            const float* residual = nullptr) {
  const int64_t Ho = conv2d_out_size(H, k, g.stride, g.pad_top, g.pad_bottom);
  const int64_t Wo = conv2d_out_size(W, k, g.stride, g.pad_left, g.pad_right);
  std::vector<double> y(static_cast<size_t>(N * Ho * Wo * Co));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t co = 0; co < Co; ++co) {
          double s = bias ? bias[co] : 0.0;
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) {
              const int64_t iy = oy * g.stride - g.pad_top + ky, ix = ox * g.stride - g.pad_left + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int64_t ci = 0; ci < Ci; ++ci)
                s += static_cast<double>(x[((n * H + iy) * W + ix) * Ci + ci]) *
                     w[((co * Ci + ci) * k + ky) * k + kx];
            }
          const int64_t o = ((n * Ho + oy) * Wo + ox) * Co + co;
          if (residual) s += residual[o];
          y[o] = s;
        }
  return y;
}

}  // namespace octodiff::kernels::test
