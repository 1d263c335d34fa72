// The AVX2 loop of kernels/throughput_probe.h.
#include <immintrin.h>

#include <cstdint>

namespace octodiff::kernels::detail {

// 10 independent chains hide the FMA latency (4–5 cycles × 2 ports).
int64_t fma_loop_avx2(int64_t iterations, float* sink) {
  __m256 a[10];
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(0.5f + static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 10
    for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
  float v[8];
  _mm256_storeu_ps(v, s);
  *sink = v[0] + v[7];
  return iterations * 10 * 8 * 2;
}

}  // namespace octodiff::kernels::detail
