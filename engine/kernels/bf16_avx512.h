// float32 → bf16 rounding on AVX-512 vectors, shared by the *_avx512.cpp files (only they are
// compiled with AVX-512 enabled; nothing else may include this header).
#pragma once

#include <immintrin.h>

namespace octodiff::kernels::detail {

// Round to nearest even on the bit patterns, as f32_to_bf16: NaNs stay (quiet) NaNs.
inline __m256i round_to_bf16(__m512i v) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(v, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// VCVTNEPS2BF16: the same rounding except that subnormals become zero (see internal.h).
inline __m256i round_to_bf16_dot(__m512i v) {
  return (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(v));
}

// 32 values, lo then hi, rounded by round_to_bf16 into one vector.
inline __m512i round_pair_to_bf16(__m512 lo, __m512 hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(round_to_bf16(_mm512_castps_si512(lo))),
                            round_to_bf16(_mm512_castps_si512(hi)), 1);
}

// The same by VCVTNE2PS2BF16 (round_to_bf16_dot's rounding): one instruction for 32 values where
// two VCVTNEPS2BF16 take 16 each — on Zen 4 a 512-bit one issues as a pair of 256-bit halves.
inline __m512i round_pair_to_bf16_dot(__m512 lo, __m512 hi) {
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

}  // namespace octodiff::kernels::detail
