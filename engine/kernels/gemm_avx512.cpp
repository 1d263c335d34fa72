// AVX-512 micro-kernel: 14 rows × 32 columns (28 zmm accumulators, 2 for B, 1 broadcast).
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

__mmask16 lane_mask(int n) {  // first n of 16 lanes
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// kHalf: only the first 16 columns of the panel are wanted (cols ≤ 16), so the second
// accumulator column is skipped: half the FMAs for narrow outputs (N = 40, 80, 3, …). The
// first column's arithmetic is the same either way, so results do not depend on the choice.
// kPrefetch 1: every k also prefetches the two lines at pf + k·kPanel (MicroKernelPrefetchFn).
// kPrefetch 2: pf_lines (≤ kc) consecutive lines from pf, evenly spread over the k loop, into L2
// (MicroKernelStreamFn).
template <int MR, bool kHalf, int kPrefetch = 0>
void kernel(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
            int cols, bool load, const float* pf = nullptr, int64_t pf_lines = 0) {
  __m512 c0[MR], c1[kHalf ? 1 : MR];
  const __mmask16 m0 = lane_mask(cols), m1 = lane_mask(cols - 16);
  if (!load) {
    // Fetch the output lines now so that their misses overlap the k loop instead of stalling
    // the stores at the end.
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      if constexpr (!kHalf) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    c0[r] = load ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    if constexpr (!kHalf) c1[r] = load ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  int64_t spread = 0;  // kPrefetch 2: pf_lines per kc iterations, Bresenham-style
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (kPrefetch == 1) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + k * kPanel), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + k * kPanel + 16), _MM_HINT_T0);
    } else if constexpr (kPrefetch == 2) {
      spread += pf_lines;
      if (spread >= kc) {
        spread -= kc;
        _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
        pf += 16;
      }
    }
    const __m512 b0 = _mm512_load_ps(b + k * kPanel);
    if constexpr (kHalf) {
      #pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + k]), b0, c0[r]);
    } else {
      const __m512 b1 = _mm512_load_ps(b + k * kPanel + 16);
      #pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * lda + k]);
        c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
        c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    if constexpr (!kHalf) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

using Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, const float*, int64_t);
// kernel<rows, kHalf, kPrefetch> indexed by rows 1 … 14 (entry 0 empty).
template <bool kHalf, int kPrefetch, int... R>
constexpr std::array<Fn, sizeof...(R) + 1> by_rows(std::integer_sequence<int, R...>) {
  return {nullptr, &kernel<R + 1, kHalf, kPrefetch>...};
}
template <bool kHalf, int kPrefetch>
constexpr auto kByRows = by_rows<kHalf, kPrefetch>(std::make_integer_sequence<int, 14>{});

void dispatch(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
              int rows, int cols, bool load) {
  (cols <= 16 ? kByRows<true, 0> : kByRows<false, 0>)[rows](kc, a, lda, b, c, ldc, cols, load, nullptr, 0);
}

void dispatch_prefetch(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                       int rows, int cols, bool load, const float* prefetch) {
  (cols <= 16 ? kByRows<true, 1> : kByRows<false, 1>)[rows](kc, a, lda, b, c, ldc, cols, load, prefetch, 0);
}

void dispatch_stream(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                     int rows, int cols, bool load, const float* prefetch, int64_t lines) {
  (cols <= 16 ? kByRows<true, 2> : kByRows<false, 2>)[rows](kc, a, lda, b, c, ldc, cols, load, prefetch, lines);
}

}  // namespace

MicroKernel micro_kernel_avx512() { return {14, &dispatch, &dispatch_prefetch, &dispatch_stream}; }

}  // namespace octodiff::kernels::detail
