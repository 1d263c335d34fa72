#include "kernels/throughput_probe.h"

#include <algorithm>
#include <chrono>

namespace octodiff::kernels {
namespace detail {
int64_t fma_loop_avx512(int64_t iterations, float* sink);
int64_t vdpbf16ps_loop_avx512(int64_t iterations, float* sink);
int64_t fma_loop_avx2(int64_t iterations, float* sink);
}  // namespace detail

namespace {

int64_t scalar_loop(int64_t iterations, float* sink) {
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int64_t it = 0; it < iterations; ++it)
    for (float& x : a) x = x * 0.999999f + 1e-7f;
  *sink = a[0] + a[7];
  return iterations * 8 * 2;
}

// FLOP/s of one run of `loop`.
double rate(ThroughputLoop loop, int64_t iterations, float* sink) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t flops = loop(iterations, sink);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(flops) / std::max(s, 1e-9);
}

}  // namespace

ThroughputLoop fma_throughput_loop(Isa isa) {
  return isa == Isa::Avx512 ? detail::fma_loop_avx512 : isa == Isa::Avx2 ? detail::fma_loop_avx2 : scalar_loop;
}

ThroughputLoop vdpbf16ps_throughput_loop() { return has_avx512_bf16() ? detail::vdpbf16ps_loop_avx512 : nullptr; }

double measure_vdpbf16ps_over_fma() {
  const ThroughputLoop dot = vdpbf16ps_throughput_loop();
  if (!dot) return 0;
  const ThroughputLoop fma = fma_throughput_loop(Isa::Avx512);
  float sink = 0;
  // 20 000 rounds of 12 instructions: 40–160 µs a run at 2–4 GHz. The warm-up (~0.4 ms of FMA)
  // gets past the slow start of 512-bit instructions on cores that power those units down.
  constexpr int64_t kIterations = 20'000;
  fma(10 * kIterations, &sink);
  double best_fma = 0, best_dot = 0;
  for (int round = 0; round < 7; ++round) {
    best_fma = std::max(best_fma, rate(fma, kIterations, &sink));
    best_dot = std::max(best_dot, rate(dot, kIterations, &sink));
  }
  return best_fma > 0 ? best_dot / best_fma : 0;
}

}  // namespace octodiff::kernels
