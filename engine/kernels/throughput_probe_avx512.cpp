// The AVX-512 loops of kernels/throughput_probe.h.
#include <immintrin.h>

#include <cstdint>

namespace octodiff::kernels::detail {
namespace {

// 12 independent chains a[i] = step(a[i]), from init(i), `iterations` times; their sum in *sink.
// 12 hide the latency of either instruction at its rate: FMA 4 cycles × 2 ports, VDPBF16PS 5–6
// cycles at up to 2 a cycle (Zen 4).
template <class Init, class Step>
void run_chains(int64_t iterations, Init init, Step step, float* sink) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = init(i);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = step(a[i]);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
}

}  // namespace

int64_t fma_loop_avx512(int64_t iterations, float* sink) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  run_chains(
      iterations, [](int i) { return _mm512_set1_ps(0.5f + static_cast<float>(i)); },
      [&](__m512 a) { return _mm512_fmadd_ps(a, m, c); }, sink);
  return iterations * 12 * 16 * 2;
}

int64_t vdpbf16ps_loop_avx512(int64_t iterations, float* sink) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a80);  // 1, 2^-10
  run_chains(
      iterations, [](int) { return _mm512_setzero_ps(); },
      [&](__m512 a) { return _mm512_dpbf16_ps(a, x, y); }, sink);
  return iterations * 12 * 16 * 4;
}

}  // namespace octodiff::kernels::detail
