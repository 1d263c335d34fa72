// AVX2 element-wise maps on an accurate vector exp (Cody–Waite reduction, degree-7 Taylor
// polynomial, 2^n through the exponent bits; inputs beyond the float range give 0 or +inf).
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-103.972f), hi = _mm256_set1_ps(88.72283f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n ∈ [-150, 128]: 2^n = 2^(n/2)·2^(n − n/2), both factors normal, so the last multiply
  // rounds once into the subnormal range (gradual underflow) and n = 128 does not overflow.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_andnot_ps(under, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()), over);
}

__m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y = x · sigmoid(s), s = s_f + ds given by `arg` (ds: the rounding residual of s_f, so the
// large arguments of the tails lose no accuracy). With e = exp(−|s|):
// sigmoid(s) = 1/(1+e) for s ≥ 0 and e/(1+e) for s < 0 — neither overflows nor cancels.
template <typename Arg>
inline __m256 x_sigmoid(__m256 v, Arg arg) {
  __m256 ds;
  const __m256 s = arg(v, &ds);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 neg = _mm256_cmp_ps(s, zero, _CMP_LT_OQ);
  const __m256 abs_s = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), s);
  __m256 e = exp8(_mm256_sub_ps(zero, abs_s));
  const __m256 corr = _mm256_blendv_ps(_mm256_sub_ps(zero, ds), ds, neg);
  e = _mm256_fmadd_ps(e, corr, e);
  const __m256 num = _mm256_blendv_ps(v, _mm256_mul_ps(v, e), neg);
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

template <typename Arg>
void map_x_sigmoid(const float* x, int64_t n, float* y, Arg arg) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, x_sigmoid(_mm256_loadu_ps(x + i), arg));
  if (i < n) {
    const __m256i m = lane_mask(n - i);
    _mm256_maskstore_ps(y + i, m, x_sigmoid(_mm256_maskload_ps(x + i, m), arg));
  }
}

// s = f(x) evaluated in double, returned as float plus its rounding residual.
template <typename F>
inline __m256 split_double(__m256 v, __m256* ds, F f) {
  const __m256d lo = f(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  const __m256d hi = f(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  const __m128 lo_f = _mm256_cvtpd_ps(lo), hi_f = _mm256_cvtpd_ps(hi);
  const __m128 lo_r = _mm256_cvtpd_ps(_mm256_sub_pd(lo, _mm256_cvtps_pd(lo_f)));
  const __m128 hi_r = _mm256_cvtpd_ps(_mm256_sub_pd(hi, _mm256_cvtps_pd(hi_f)));
  *ds = _mm256_insertf128_ps(_mm256_castps128_ps256(lo_r), hi_r, 1);
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo_f), hi_f, 1);
}

void silu(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m256 v, __m256* ds) {
    *ds = _mm256_setzero_ps();
    return v;
  });
}

void quick_gelu(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m256 v, __m256* ds) {
    return split_double(v, ds, [](__m256d d) { return _mm256_mul_pd(d, _mm256_set1_pd(1.702)); });
  });
}

// 0.5·x·(1 + tanh(u)) = x · sigmoid(2u), u = √(2/π)·(x + 0.044715·x³): no cancellation.
void gelu_tanh(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m256 v, __m256* ds) {
    return split_double(v, ds, [](__m256d d) {
      constexpr double k = 2.0 * 0.79788456080286535588;
      const __m256d d2 = _mm256_mul_pd(d, d);
      return _mm256_mul_pd(d, _mm256_fmadd_pd(d2, _mm256_set1_pd(k * 0.044715), _mm256_set1_pd(k)));
    });
  });
}

// ½·erfc(z) for z ≥ 0 as ½·t·exp(P(t) − z²), t = 1/(1 + z/2), P of degree 9 fitted by least
// squares (our own fit, relative error of erfc ≤ 7e-8 on [0, 10] with these float
// coefficients). z and z² come from double so that the large z² of the tail adds no error.
inline __m256 gelu_erf8(__m256 x) {
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256d rs2 = _mm256_set1_pd(0.70710678118654752440);
  const __m256d z_lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(ax)), rs2);
  const __m256d z_hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(ax, 1)), rs2);
  const __m256d zz_lo = _mm256_mul_pd(z_lo, z_lo), zz_hi = _mm256_mul_pd(z_hi, z_hi);
  auto join = [](__m128 a, __m128 b) { return _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1); };
  const __m128 zz_lo_f = _mm256_cvtpd_ps(zz_lo), zz_hi_f = _mm256_cvtpd_ps(zz_hi);
  const __m256 z = join(_mm256_cvtpd_ps(z_lo), _mm256_cvtpd_ps(z_hi));
  const __m256 zz = join(zz_lo_f, zz_hi_f);
  const __m256 zz_res = join(_mm256_cvtpd_ps(_mm256_sub_pd(zz_lo, _mm256_cvtps_pd(zz_lo_f))),
                             _mm256_cvtpd_ps(_mm256_sub_pd(zz_hi, _mm256_cvtps_pd(zz_hi_f))));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), one));
  __m256 p = _mm256_set1_ps(0.144930213708f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.68082717772f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.156733757f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.69625189876f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.0802804322893f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.00126758641915f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0346027999885f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.386640412152f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.998632783338f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.2654479969f));
  // w = p − zz exactly as w + err (TwoSum), so exp(p − zz) = exp(w)·(1 + err − zz_res).
  const __m256 b = _mm256_sub_ps(_mm256_setzero_ps(), zz);
  const __m256 w = _mm256_add_ps(p, b);
  const __m256 bb = _mm256_sub_ps(w, p);
  const __m256 err = _mm256_add_ps(_mm256_sub_ps(p, _mm256_sub_ps(w, bb)), _mm256_sub_ps(b, bb));
  const __m256 corr = _mm256_sub_ps(err, zz_res);
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), t), exp8(w));
  e = _mm256_fmadd_ps(e, corr, e);  // ½·erfc(|x|/√2)
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 phi = _mm256_blendv_ps(_mm256_sub_ps(one, e), e, neg);
  return _mm256_mul_ps(x, phi);
}

void gelu_erf(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_erf8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = lane_mask(n - i);
    _mm256_maskstore_ps(y + i, m, gelu_erf8(_mm256_maskload_ps(x + i, m)));
  }
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float softmax_update(float* s, int n, float scale, float* m, float* l) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const float ninf_f = -std::numeric_limits<float>::infinity();
  const __m256 ninf = _mm256_set1_ps(ninf_f);
  __m256 vmax = ninf;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + i), vscale);
    _mm256_storeu_ps(s + i, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  float mx = hmax(vmax);
  for (int j = i; j < n; ++j) {
    s[j] *= scale;
    mx = std::max(mx, s[j]);
  }
  const float m_new = std::max(*m, mx);
  const float alpha = softmax_rescale(*m, m_new);
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    const __m256i tail = lane_mask(n - i);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(tail),
                                   exp8(_mm256_sub_ps(_mm256_maskload_ps(s + i, tail), vm)));
    _mm256_maskstore_ps(s + i, tail, e);
    sum = _mm256_add_ps(sum, e);
  }
  *l = *l * alpha + hsum(sum);
  *m = m_new;
  return alpha;
}

inline __m256i round_to_bf16(__m256i v) {  // 8 results in the low 16 bits of each lane
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

float softmax_update_bf16(float* s, int n, float scale, float* m, float* l, uint16_t* p) {
  const float alpha = softmax_update(s, n, scale, m, l);
  to_bf16_avx2(s, n, p);
  return alpha;
}

}  // namespace

void to_bf16_avx2(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i r = round_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    // packus interleaves the 128-bit lanes: [r0..3 r0..3 | r4..7 r4..7] → qwords 0 and 2.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(packed));
  }
  to_bf16_generic(x + i, n - i, y + i);
}

const VecMath& vec_math_avx2() {
  static const VecMath v{&silu, &gelu_tanh, &quick_gelu, &softmax_update, &gelu_erf, &softmax_update_bf16};
  return v;
}

}  // namespace octodiff::kernels::detail
