// AVX2 bf16 micro-kernel: widens each pair-row to float32 and uses FMA, 4 rows × 16 columns
// (8 ymm accumulators, 4 for the widened B, 2 for the widened A pair) on each half of a panel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

__m256i lane_mask(int n) {  // first n of 8 lanes set
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

inline uint32_t load_pair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __m256 odd_f32(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xFFFF0000u))));
}
inline __m256 even_f32(__m256i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
inline __m256 bcast_f32(uint32_t bits) {
  return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(bits)));
}

// Named accumulators, not arrays (see gemm_avx2.cpp).
#define OCTODIFF_ROWS(X) X(0) X(1) X(2) X(3)

// b: the half panel's first pair-row element (16 columns × 2, pair-rows kPairRow apart).
template <int MR>
void kernel(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, int cols,
            bool load, const TileEpilogue& ep) {
  const __m256i m0 = lane_mask(std::min(cols, 8)), m1 = lane_mask(cols - 8);
#define INIT(r)                                                      \
  __m256 c0_##r = _mm256_setzero_ps(), c1_##r = _mm256_setzero_ps(); \
  if constexpr (MR > r) {                                            \
    if (load) {                                                      \
      c0_##r = _mm256_maskload_ps(c + r * ldc, m0);                  \
      c1_##r = _mm256_maskload_ps(c + r * ldc + 8, m1);              \
    }                                                                \
  }
  OCTODIFF_ROWS(INIT)
#undef INIT
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256i x0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + q * kPairRow));
    const __m256i x1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + q * kPairRow + 16));
    const __m256 b0o = odd_f32(x0), b0e = even_f32(x0), b1o = odd_f32(x1), b1e = even_f32(x1);
#define STEP(r)                                                              \
  if constexpr (MR > r) {                                                    \
    const uint32_t pr = load_pair(a + r * lda + 2 * q);                      \
    const __m256 ao = bcast_f32(pr & 0xFFFF0000u), ae = bcast_f32(pr << 16); \
    c0_##r = _mm256_fmadd_ps(ao, b0o, c0_##r);                               \
    c1_##r = _mm256_fmadd_ps(ao, b1o, c1_##r);                               \
    c0_##r = _mm256_fmadd_ps(ae, b0e, c0_##r);                               \
    c1_##r = _mm256_fmadd_ps(ae, b1e, c1_##r);                               \
  }
    OCTODIFF_ROWS(STEP)
#undef STEP
  }
#define STORE(r)                                                           \
  if constexpr (MR > r) {                                                  \
    if (ep.bias) {                                                         \
      c0_##r = _mm256_add_ps(c0_##r, _mm256_maskload_ps(ep.bias, m0));     \
      c1_##r = _mm256_add_ps(c1_##r, _mm256_maskload_ps(ep.bias + 8, m1)); \
    }                                                                      \
    if (ep.residual) {                                                     \
      const float* res = ep.residual + r * ep.ldr;                         \
      c0_##r = _mm256_add_ps(c0_##r, _mm256_maskload_ps(res, m0));         \
      c1_##r = _mm256_add_ps(c1_##r, _mm256_maskload_ps(res + 8, m1));     \
    }                                                                      \
    _mm256_maskstore_ps(c + r * ldc, m0, c0_##r);                          \
    _mm256_maskstore_ps(c + r * ldc + 8, m1, c1_##r);                      \
  }
  OCTODIFF_ROWS(STORE)
#undef STORE
}

#undef OCTODIFF_ROWS

void half(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, int rows,
          int cols, bool load, const TileEpilogue& ep) {
  switch (rows) {
    case 4:
      return kernel<4>(pairs, a, lda, b, c, ldc, cols, load, ep);
    case 3:
      return kernel<3>(pairs, a, lda, b, c, ldc, cols, load, ep);
    case 2:
      return kernel<2>(pairs, a, lda, b, c, ldc, cols, load, ep);
    default:
      return kernel<1>(pairs, a, lda, b, c, ldc, cols, load, ep);
  }
}

void dispatch(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
              int rows, int cols, bool load, const TileEpilogue& ep) {
  half(pairs, a, lda, b, c, ldc, rows, std::min(cols, 16), load, ep);
  if (cols > 16) {
    TileEpilogue right = ep;
    if (right.bias) right.bias += 16;
    if (right.residual) right.residual += 16;
    half(pairs, a, lda, b + 32, c + 16, ldc, rows, cols - 16, load, right);
  }
}

}  // namespace

MicroKernelBf16 micro_kernel_bf16_avx2() {
  return {4, &dispatch};
}

}  // namespace octodiff::kernels::detail
