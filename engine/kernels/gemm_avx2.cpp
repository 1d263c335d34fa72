// AVX2 micro-kernel: 6 rows × 16 columns (12 ymm accumulators), run on each half of a
// 32-column panel.
#include <immintrin.h>

#include <algorithm>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

__m256i lane_mask(int n) {  // first n of 8 lanes set
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

// The accumulators are named variables, not arrays: GCC 12 keeps an array of __m256 in
// registers but also stores it to the stack on every k step (half the speed).
#define OCTODIFF_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

template <int MR>
void kernel(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
            int cols, bool load) {
  const __m256i m0 = lane_mask(std::min(cols, 8)), m1 = lane_mask(cols - 8);
#define INIT(r)                                                                                  \
  __m256 c0_##r = _mm256_setzero_ps(), c1_##r = _mm256_setzero_ps();                            \
  if constexpr (MR > r) {                                                                         \
    if (load) {                                                                                   \
      c0_##r = _mm256_maskload_ps(c + r * ldc, m0);                                               \
      c1_##r = _mm256_maskload_ps(c + r * ldc + 8, m1);                                           \
    }                                                                                             \
  }
  OCTODIFF_ROWS(INIT)
#undef INIT
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * kPanel), b1 = _mm256_load_ps(b + k * kPanel + 8);
#define STEP(r)                                                                                  \
  if constexpr (MR > r) {                                                                         \
    const __m256 av = _mm256_broadcast_ss(a + r * lda + k);                                       \
    c0_##r = _mm256_fmadd_ps(av, b0, c0_##r);                                                     \
    c1_##r = _mm256_fmadd_ps(av, b1, c1_##r);                                                     \
  }
    OCTODIFF_ROWS(STEP)
#undef STEP
  }
  if (cols == 16) {  // vmaskmovps stores are slow on AMD: full tiles use plain stores
#define STORE(r)                                                                                 \
  if constexpr (MR > r) {                                                                         \
    _mm256_storeu_ps(c + r * ldc, c0_##r);                                                        \
    _mm256_storeu_ps(c + r * ldc + 8, c1_##r);                                                    \
  }
    OCTODIFF_ROWS(STORE)
#undef STORE
  } else {
#define STORE(r)                                                                                 \
  if constexpr (MR > r) {                                                                         \
    _mm256_maskstore_ps(c + r * ldc, m0, c0_##r);                                                 \
    _mm256_maskstore_ps(c + r * ldc + 8, m1, c1_##r);                                             \
  }
    OCTODIFF_ROWS(STORE)
#undef STORE
  }
}

#undef OCTODIFF_ROWS

void half(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int rows,
          int cols, bool load) {
  switch (rows) {
    case 6: return kernel<6>(kc, a, lda, b, c, ldc, cols, load);
    case 5: return kernel<5>(kc, a, lda, b, c, ldc, cols, load);
    case 4: return kernel<4>(kc, a, lda, b, c, ldc, cols, load);
    case 3: return kernel<3>(kc, a, lda, b, c, ldc, cols, load);
    case 2: return kernel<2>(kc, a, lda, b, c, ldc, cols, load);
    default: return kernel<1>(kc, a, lda, b, c, ldc, cols, load);
  }
}

void dispatch(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
              int rows, int cols, bool load) {
  half(kc, a, lda, b, c, ldc, rows, std::min(cols, 16), load);
  if (cols > 16) half(kc, a, lda, b + 16, c + 16, ldc, rows, cols - 16, load);
}

}  // namespace

MicroKernel micro_kernel_avx2() { return {6, &dispatch}; }

}  // namespace octodiff::kernels::detail
