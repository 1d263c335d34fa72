// The few-output convolution's row (conv2d_few_outputs.h) on AVX2: lanes 0–7 and 8–15 in two
// registers, the same operations lane by lane as on AVX-512.
#include <immintrin.h>

#include "kernels/conv2d_few_outputs.h"
#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

struct Lanes256x2 {
  __m256 lo, hi;
  static Lanes256x2 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  // Registers the compiler may not fold back into every FMA as memory operands (as on AVX-512).
  static Lanes256x2 load(const float* p) {
    __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    asm("" : "+x"(lo), "+x"(hi));
    return {lo, hi};
  }
  static Lanes256x2 fma(Lanes256x2 a, Lanes256x2 b, Lanes256x2 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static float sum(Lanes256x2 x) {
    const __m256 s8 = _mm256_add_ps(x.lo, x.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void few_outputs_row_avx2(const FewOutputsRow& r, int out_channels) {
  few_outputs_row<Lanes256x2>(r, out_channels);
}

}  // namespace octodiff::kernels::detail
