// Compiled with AVX-512 flags (see bench/CMakeLists.txt); only called when the CPU has them.
#include <immintrin.h>

#include <cstdint>

namespace octodiff::bench::detail {

// 12 independent accumulator chains hide the FMA latency (4 cycles × 2 ports + margin).
int64_t fma_loop_avx512(int64_t iterations, float* sink) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.5f + i);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
  return iterations * 12 * 16 * 2;  // FLOPs
}

int64_t bf16_loop_avx512(int64_t iterations, float* sink) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a80);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
  return iterations * 12 * 16 * 4;  // 2 multiplies + 2 adds per fp32 lane
}

}  // namespace octodiff::bench::detail
