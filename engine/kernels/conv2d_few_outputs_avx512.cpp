// The few-output convolution's row (conv2d_few_outputs.h) on AVX-512: one register per 16 lanes.
#include <immintrin.h>

#include "kernels/conv2d_few_outputs.h"
#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

struct Lanes512 {
  __m512 v;
  static Lanes512 zero() { return {_mm512_setzero_ps()}; }
  // A register the compiler may not fold back into every FMA as a memory operand (it would load
  // each input vector once per output channel: more loads than FMAs).
  static Lanes512 load(const float* p) {
    __m512 v = _mm512_loadu_ps(p);
    asm("" : "+v"(v));
    return {v};
  }
  static Lanes512 fma(Lanes512 a, Lanes512 b, Lanes512 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static float sum(Lanes512 x) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(x.v), _mm512_extractf32x8_ps(x.v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void few_outputs_row_avx512(const FewOutputsRow& r, int out_channels) {
  few_outputs_row<Lanes512>(r, out_channels);
}

}  // namespace octodiff::kernels::detail
