// AVX-512 micro-kernel: 14 rows × 32 columns (28 zmm accumulators, 2 for B, 1 broadcast).
#include <immintrin.h>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

__mmask16 lane_mask(int n) {  // first n of 16 lanes
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

template <int MR>
void kernel(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
            int cols, bool load) {
  __m512 c0[MR], c1[MR];
  const __mmask16 m0 = lane_mask(cols), m1 = lane_mask(cols - 16);
  for (int r = 0; r < MR; ++r) {
    if (load) {
      c0[r] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
      c1[r] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
    } else {
      c0[r] = _mm512_setzero_ps();
      c1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kPanel), b1 = _mm512_load_ps(b + k * kPanel + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

using Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool);
constexpr Fn kByRows[15] = {nullptr,    kernel<1>,  kernel<2>,  kernel<3>,  kernel<4>,
                            kernel<5>,  kernel<6>,  kernel<7>,  kernel<8>,  kernel<9>,
                            kernel<10>, kernel<11>, kernel<12>, kernel<13>, kernel<14>};

void dispatch(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
              int rows, int cols, bool load) {
  kByRows[rows](kc, a, lda, b, c, ldc, cols, load);
}

}  // namespace

MicroKernel micro_kernel_avx512() { return {14, &dispatch}; }

}  // namespace octodiff::kernels::detail
