// The AVX-512 loops of kernels/throughput_probe.h.
#include <immintrin.h>

#include <cstdint>

namespace octodiff::kernels::detail {

// 12 independent chains hide the FMA latency (4 cycles × 2 ports, with margin).
int64_t fma_loop_avx512(int64_t iterations, float* sink) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.5f + static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
  return iterations * 12 * 16 * 2;
}

// 12 chains as well: VDPBF16PS's latency (5–6 cycles) at up to 2 a cycle (Zen 4).
int64_t vdpbf16ps_loop_avx512(int64_t iterations, float* sink) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a80);  // 1, 2^-10
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
  return iterations * 12 * 16 * 4;
}

}  // namespace octodiff::kernels::detail
