// AVX-512 bf16 micro-kernels: VDPBF16PS (14 rows × 32 columns, like the f32 kernel: 28 zmm
// accumulators, 2 for B, 1 broadcast pair), and one that uses FMA on A widened beforehand and B
// widened pair by pair (14 × 32 too), for AVX-512 CPUs without BF16 and for those where
// VDPBF16PS issues at half the FMA rate.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

__mmask16 lane_mask(int n) {  // first n of 16 lanes
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

inline uint32_t load_pair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __m512bh as_bh(__m512i v) {
  return (__m512bh)v;
}  // a bit cast between vector types

inline void prefetch_tile(float* c, int64_t ldc, int rows, bool half) {
  // Fetch the output lines now so that their misses overlap the k loop.
  for (int r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    if (!half) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
}

// The accumulators of an MR-row tile: the tile of c when `load`, else zero (its lines prefetched
// when a long K loop follows).
template <int MR, bool kHalf>
[[gnu::always_inline]] inline void start_tile(__m512* c0, __m512* c1, float* c, int64_t ldc, __mmask16 m0,
                                              __mmask16 m1, bool load, int64_t pairs) {
  // A short K loop (attention's Q·Kᵀ into an L1-resident tile) has nothing to hide a fetch behind.
  if (!load && pairs >= 64) prefetch_tile(c, ldc, MR, kHalf);
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    c0[r] = load ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    if constexpr (!kHalf) c1[r] = load ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
}

// c = (acc + bias) + residual, each sum rounded (apply_epilogue's order), then stored.
template <int MR, bool kHalf>
[[gnu::always_inline]] inline void store_tile(__m512* c0, __m512* c1, float* c, int64_t ldc, __mmask16 m0, __mmask16 m1,
                       const TileEpilogue& ep) {
  if (ep.bias) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, ep.bias);
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) c0[r] = _mm512_add_ps(c0[r], b0);
    if constexpr (!kHalf) {
      const __m512 b1 = _mm512_maskz_loadu_ps(m1, ep.bias + 16);
      #pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) c1[r] = _mm512_add_ps(c1[r], b1);
    }
  }
  if (ep.residual) {
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      c0[r] = _mm512_add_ps(c0[r], _mm512_maskz_loadu_ps(m0, ep.residual + r * ep.ldr));
      if constexpr (!kHalf)
        c1[r] = _mm512_add_ps(c1[r], _mm512_maskz_loadu_ps(m1, ep.residual + r * ep.ldr + 16));
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    if constexpr (!kHalf) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

// kHalf: only the first 16 columns are wanted (cols ≤ 16); see gemm_avx512.cpp.
// kLda ≠ 0: A's row stride is known at compile time (the GEMM driver's A blocks,
// kBlockLdaBf16), so the 14 rows are immediate offsets from one pointer. With a run-time stride
// GCC keeps 14 row pointers, two of them spilled and reloaded every pair; this was 0.6-3.3 %
// faster on every bf16 GEMM shape of the UNet (interleaved A/B runs on Zen 4).
template <int MR, bool kHalf, int64_t kLda = 0>
void dot_kernel(int64_t pairs, const uint16_t* a, int64_t lda_, const uint16_t* b, float* c, int64_t ldc,
                int cols, bool load, const TileEpilogue& ep) {
  const int64_t lda = kLda ? kLda : lda_;
  __m512 c0[MR], c1[kHalf ? 1 : MR];
  const __mmask16 m0 = lane_mask(cols), m1 = lane_mask(cols - 16);
  start_tile<MR, kHalf>(c0, c1, c, ldc, m0, m1, load, pairs);
  for (int64_t q = 0; q < pairs; ++q) {
    // B streams from L2 (a panel's K chunk is 48 KiB): fetch it 16 pair-rows ahead (+3-5 %).
    _mm_prefetch(reinterpret_cast<const char*>(b + (q + 16) * kPairRow), _MM_HINT_T0);
    if constexpr (!kHalf) _mm_prefetch(reinterpret_cast<const char*>(b + (q + 16) * kPairRow + 32), _MM_HINT_T0);
    const __m512bh b0 = as_bh(_mm512_load_si512(b + q * kPairRow));
    if constexpr (kHalf) {
      #pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
        c0[r] = _mm512_dpbf16_ps(c0[r], as_bh(_mm512_set1_epi32(load_pair(a + r * lda + 2 * q))), b0);
    } else {
      const __m512bh b1 = as_bh(_mm512_load_si512(b + q * kPairRow + 32));
      #pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m512bh av = as_bh(_mm512_set1_epi32(load_pair(a + r * lda + 2 * q)));
        c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
        c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
      }
    }
  }
  store_tile<MR, kHalf>(c0, c1, c, ldc, m0, m1, ep);
}

// cols ≤ 8 (the last 8 columns of a 40-wide output, e.g. attention's P·V at head_dim 40): the
// 256-bit VDPBF16PS does the same arithmetic on the first 8 columns at half the cost.
template <int MR>
void dot_kernel_narrow(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c,
                       int64_t ldc, int cols, bool load, const TileEpilogue& ep) {
  __m256 acc[MR];
  const __mmask8 m = __mmask8(lane_mask(cols));
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r] = load ? _mm256_maskz_loadu_ps(m, c + r * ldc) : _mm256_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256bh b0 = (__m256bh)_mm256_load_si256(reinterpret_cast<const __m256i*>(b + q * kPairRow));
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
      acc[r] = _mm256_dpbf16_ps(acc[r], (__m256bh)_mm256_set1_epi32(load_pair(a + r * lda + 2 * q)), b0);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (ep.bias) acc[r] = _mm256_add_ps(acc[r], _mm256_maskz_loadu_ps(m, ep.bias));
    if (ep.residual) acc[r] = _mm256_add_ps(acc[r], _mm256_maskz_loadu_ps(m, ep.residual + r * ep.ldr));
    _mm256_mask_storeu_ps(c + r * ldc, m, acc[r]);
  }
}

// The bf16 values of a pair-row as float32: the odd element is the high half of each 32-bit
// lane (kept by a masked load of the 64 bytes at p), the even one the low half (shifted up).
inline __m512 odd_f32(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(__mmask32(0xAAAAAAAAu), p));
}
inline __m512 even_f32(__m512i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// FMA on widened values, 14 × 32 like the f32 kernel (28 accumulators, 2 widened B vectors): A
// comes widened (the driver widens a block once for all its panels) and is broadcast from
// memory, so per pair only B is split — 4 integer operations per 56 FMAs. Per pair the odd
// products go first, then the even ones: VDPBF16PS's order, the same bits. For cores where
// VDPBF16PS issues at half the FMA rate (Intel Sapphire/Emerald Rapids, measured) and AVX-512
// cores without BF16.
template <int MR, bool kHalf, int64_t kLda = 0>
void wide_kernel(int64_t pairs, const float* a, int64_t lda_, const uint16_t* b, float* c, int64_t ldc, int cols,
                 bool load, const TileEpilogue& ep) {
  const int64_t lda = kLda ? kLda : lda_;
  __m512 c0[MR], c1[kHalf ? 1 : MR];
  const __mmask16 m0 = lane_mask(cols), m1 = lane_mask(cols - 16);
  start_tile<MR, kHalf>(c0, c1, c, ldc, m0, m1, load, pairs);
  for (int64_t q = 0; q < pairs; ++q) {
    _mm_prefetch(reinterpret_cast<const char*>(b + (q + 16) * kPairRow), _MM_HINT_T0);
    if constexpr (!kHalf) _mm_prefetch(reinterpret_cast<const char*>(b + (q + 16) * kPairRow + 32), _MM_HINT_T0);
    const uint16_t* bq = b + q * kPairRow;
    #pragma GCC unroll 2
    for (int e = 1; e >= 0; --e) {  // the odd element of the pair, then the even one
      // The odd halves by a masked load (a k register, not a 32nd zmm: 28 accumulators, 2 B
      // vectors and the broadcast A value are all the kernel can hold without spilling).
      const __m512 b0 = e ? odd_f32(bq) : even_f32(_mm512_load_si512(bq));
      if constexpr (kHalf) {
        #pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + 2 * q + e]), b0, c0[r]);
      } else {
        const __m512 b1 = e ? odd_f32(bq + 32) : even_f32(_mm512_load_si512(bq + 32));
        #pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          const __m512 av = _mm512_set1_ps(a[r * lda + 2 * q + e]);
          c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
          c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
      }
    }
  }
  store_tile<MR, kHalf>(c0, c1, c, ldc, m0, m1, ep);
}

void widen_rows(const uint16_t* a, int64_t lda, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* x = a + r * lda;
    float* y = out + r * lda;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = lane_mask(static_cast<int>(n - i));
      const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
      _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
  }
}

// K<rows, kHalf>::run for rows 1 … sizeof(R), indexed by rows (entry 0 empty), of K's signature.
template <template <int, bool> class K, bool kHalf, int... R>
constexpr auto by_rows(std::integer_sequence<int, R...>) {
  return std::array<decltype(&K<1, kHalf>::run), sizeof...(R) + 1>{nullptr, &K<R + 1, kHalf>::run...};
}

// Two template parameters each (by_rows takes template <int, bool> class; clang 14 will not
// match a template with a defaulted third one).
template <int MR, bool kHalf, int64_t kLda>
struct DotWithLda {
  static void run(int64_t p, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
                  int cols, bool load, const TileEpilogue& ep) {
    dot_kernel<MR, kHalf, kLda>(p, a, lda, b, c, ldc, cols, load, ep);
  }
};
template <int MR, bool kHalf>
struct Dot : DotWithLda<MR, kHalf, 0> {};
template <int MR, bool kHalf>
struct DotFixed : DotWithLda<MR, kHalf, kBlockLdaBf16> {};
template <int MR, bool>
struct DotNarrow {
  static void run(int64_t p, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
                  int cols, bool load, const TileEpilogue& ep) {
    dot_kernel_narrow<MR>(p, a, lda, b, c, ldc, cols, load, ep);
  }
};
template <int MR, bool kHalf, int64_t kLda>
struct WideWithLda {
  static void run(int64_t p, const float* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, int cols,
                  bool load, const TileEpilogue& ep) {
    wide_kernel<MR, kHalf, kLda>(p, a, lda, b, c, ldc, cols, load, ep);
  }
};
template <int MR, bool kHalf>
struct Wide : WideWithLda<MR, kHalf, 0> {};
template <int MR, bool kHalf>
struct WideFixed : WideWithLda<MR, kHalf, kBlockLdaBf16> {};

constexpr auto kDot = by_rows<Dot, false>(std::make_integer_sequence<int, 14>{});
constexpr auto kDotHalf = by_rows<Dot, true>(std::make_integer_sequence<int, 14>{});
constexpr auto kDotFixed = by_rows<DotFixed, false>(std::make_integer_sequence<int, 14>{});
constexpr auto kDotNarrow = by_rows<DotNarrow, true>(std::make_integer_sequence<int, 14>{});
constexpr auto kWide = by_rows<Wide, false>(std::make_integer_sequence<int, 14>{});
constexpr auto kWideHalf = by_rows<Wide, true>(std::make_integer_sequence<int, 14>{});
constexpr auto kWideFixed = by_rows<WideFixed, false>(std::make_integer_sequence<int, 14>{});
constexpr auto kWideFixedHalf = by_rows<WideFixed, true>(std::make_integer_sequence<int, 14>{});

void dispatch_dot(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
                  int rows, int cols, bool load, const TileEpilogue& ep) {
  const auto& kernels = cols <= 8 ? kDotNarrow : cols <= 16 ? kDotHalf : lda == kBlockLdaBf16 ? kDotFixed : kDot;
  kernels[rows](pairs, a, lda, b, c, ldc, cols, load, ep);
}

void dispatch_wide(int64_t pairs, const float* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, int rows,
                   int cols, bool load, const TileEpilogue& ep) {
  const bool fixed = lda == kBlockLdaBf16;
  const auto& kernels = cols <= 16 ? (fixed ? kWideFixedHalf : kWideHalf) : (fixed ? kWideFixed : kWide);
  kernels[rows](pairs, a, lda, b, c, ldc, cols, load, ep);
}

}  // namespace

MicroKernelBf16 micro_kernel_bf16_avx512_dot() {
  return {14, &dispatch_dot};
}
MicroKernelBf16 micro_kernel_bf16_avx512() {
  return {14, nullptr, &dispatch_wide, &widen_rows};
}

}  // namespace octodiff::kernels::detail
