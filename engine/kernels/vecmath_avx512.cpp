// AVX-512 element-wise maps built on one accurate vector exp (≈1 ulp: Cody–Waite reduction,
// degree-7 Taylor polynomial on |r| ≤ ln2/2, scalef for 2^n which also gives exact overflow and
// gradual underflow).
// GCC 12's AVX-512 headers build min/max/roundscale/scalef on _mm512_undefined_ps(), which
// its own -Wuninitialized then reports once inlined here: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/bf16_avx512.h"
#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-150.0f)), _mm512_set1_ps(100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// y = x · sigmoid(s), s = s_f + ds given by `arg` (ds: the rounding residual of s_f, so the
// large arguments of the tails lose no accuracy). With e = exp(−|s|):
// sigmoid(s) = 1/(1+e) for s ≥ 0 and e/(1+e) for s < 0 — neither overflows nor cancels.
template <typename Arg>
inline __m512 x_sigmoid(__m512 v, Arg arg) {
  __m512 ds;
  const __m512 s = arg(v, &ds);
  const __mmask16 neg = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(s)));
  const __m512 corr = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_setzero_ps(), ds), ds);
  e = _mm512_fmadd_ps(e, corr, e);
  const __m512 num = _mm512_mask_mul_ps(v, neg, v, e);
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

template <typename Arg>
void map_x_sigmoid(const float* x, int64_t n, float* y, Arg arg) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, x_sigmoid(_mm512_loadu_ps(x + i), arg));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, x_sigmoid(_mm512_maskz_loadu_ps(m, x + i), arg));
  }
}

// s = f(x) evaluated in double, returned as float plus its rounding residual.
template <typename F>
inline __m512 split_double(__m512 v, __m512* ds, F f) {
  const __m512d lo = f(_mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  const __m512d hi = f(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
  const __m256 lo_f = _mm512_cvtpd_ps(lo), hi_f = _mm512_cvtpd_ps(hi);
  const __m256 lo_r = _mm512_cvtpd_ps(_mm512_sub_pd(lo, _mm512_cvtps_pd(lo_f)));
  const __m256 hi_r = _mm512_cvtpd_ps(_mm512_sub_pd(hi, _mm512_cvtps_pd(hi_f)));
  *ds = _mm512_insertf32x8(_mm512_castps256_ps512(lo_r), hi_r, 1);
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo_f), hi_f, 1);
}

void silu(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m512 v, __m512* ds) {
    *ds = _mm512_setzero_ps();
    return v;
  });
}

void quick_gelu(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m512 v, __m512* ds) {
    return split_double(v, ds, [](__m512d d) { return _mm512_mul_pd(d, _mm512_set1_pd(1.702)); });
  });
}

// 0.5·x·(1 + tanh(u)) = x · sigmoid(2u), u = √(2/π)·(x + 0.044715·x³): no cancellation.
void gelu_tanh(const float* x, int64_t n, float* y) {
  map_x_sigmoid(x, n, y, [](__m512 v, __m512* ds) {
    return split_double(v, ds, [](__m512d d) {
      constexpr double k = 2.0 * 0.79788456080286535588;
      const __m512d d2 = _mm512_mul_pd(d, d);
      return _mm512_mul_pd(d, _mm512_fmadd_pd(d2, _mm512_set1_pd(k * 0.044715), _mm512_set1_pd(k)));
    });
  });
}

// ½·erfc(z) for z ≥ 0 as ½·t·exp(P(t) − z²), t = 1/(1 + z/2), P of degree 9 fitted by least
// squares (our own fit, relative error of erfc ≤ 7e-8 on [0, 10] with these float
// coefficients). z and z² come from double so that the large z² of the tail adds no error.
inline __m512 gelu_erf16(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512d rs2 = _mm512_set1_pd(0.70710678118654752440);
  const __m512d z_lo = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(ax)), rs2);
  const __m512d z_hi = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(ax, 1)), rs2);
  const __m512d zz_lo = _mm512_mul_pd(z_lo, z_lo), zz_hi = _mm512_mul_pd(z_hi, z_hi);
  auto join = [](__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); };
  const __m256 zz_lo_f = _mm512_cvtpd_ps(zz_lo), zz_hi_f = _mm512_cvtpd_ps(zz_hi);
  const __m512 z = join(_mm512_cvtpd_ps(z_lo), _mm512_cvtpd_ps(z_hi));
  const __m512 zz = join(zz_lo_f, zz_hi_f);
  const __m512 zz_res = join(_mm512_cvtpd_ps(_mm512_sub_pd(zz_lo, _mm512_cvtps_pd(zz_lo_f))),
                             _mm512_cvtpd_ps(_mm512_sub_pd(zz_hi, _mm512_cvtps_pd(zz_hi_f))));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), one));
  __m512 p = _mm512_set1_ps(0.144930213708f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.68082717772f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.156733757f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.69625189876f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.0802804322893f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.00126758641915f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0346027999885f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.386640412152f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.998632783338f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.2654479969f));
  // w = p − zz exactly as w + err (TwoSum), so exp(p − zz) = exp(w)·(1 + err − zz_res).
  const __m512 b = _mm512_sub_ps(_mm512_setzero_ps(), zz);
  const __m512 w = _mm512_add_ps(p, b);
  const __m512 bb = _mm512_sub_ps(w, p);
  const __m512 err = _mm512_add_ps(_mm512_sub_ps(p, _mm512_sub_ps(w, bb)), _mm512_sub_ps(b, bb));
  const __m512 corr = _mm512_sub_ps(err, zz_res);
  __m512 e = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), t), exp16(w));
  e = _mm512_fmadd_ps(e, corr, e);  // ½·erfc(|x|/√2)
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, e), e);
  return _mm512_mul_ps(x, phi);
}

void gelu_erf(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu_erf16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu_erf16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// The mask of the n mod 16 elements after the last full 16-lane block.
inline __mmask16 tail_mask16(int n) {
  return __mmask16((1u << (n % 16)) - 1);
}

// Pass 1 of the softmax updates: the row maximum of scale·s (scale·s is rounded as the spec
// computes it).
inline float scaled_row_max(const float* s, int n, __m512 vscale) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmax = ninf;
  int i = 0;
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_mul_ps(_mm512_loadu_ps(s + i), vscale));
  const __mmask16 tail = tail_mask16(n);
  if (i < n) vmax = _mm512_max_ps(vmax, _mm512_mul_ps(_mm512_mask_loadu_ps(ninf, tail, s + i), vscale));
  return _mm512_reduce_max_ps(vmax);
}

float softmax_update(float* s, int n, float scale, float* m, float* l) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const float m_new = std::max(*m, scaled_row_max(s, n, vscale));
  const float alpha = softmax_rescale(*m, m_new);
  // Pass 2: s ← exp(scale·s − m'), summed.
  const __m512 vm = _mm512_set1_ps(m_new);
  const __mmask16 tail = tail_mask16(n);
  __m512 sum = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s + i), vscale), vm));
    _mm512_storeu_ps(s + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    const __m512 e = _mm512_maskz_mov_ps(
        tail, exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + i), vscale), vm)));
    _mm512_mask_storeu_ps(s + i, tail, e);
    sum = _mm512_add_ps(sum, e);
  }
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  *m = m_new;
  return alpha;
}

// 2^t for t ≤ 0: t = n + f with n = round(t), |f| ≤ ½, 2^f by a degree-4 polynomial (interpolating
// at the Chebyshev nodes of [−½, ½]; relative error ≤ 3.5e-6), scalef for 2^n (underflows to 0
// below −149). Only the softmaxes whose probabilities are then rounded to bf16 by the BF16
// instructions use it (relative error up to 2⁻⁹ ≈ 2e-3): the degree-6 Taylor polynomial's 1.3e-7
// bought nothing there and cost two more FMAs per 16 scores, an eighth of the softmax's arithmetic.
inline __m512 exp2_nonpositive(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 q = _mm512_set1_ps(9.666368515387469e-3f);
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5921975842256264e-2f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022349038020335e-1f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.931210452034270e-1f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(q, n);
}

// VecMath::softmax_columns: 16 columns at a time, down the rows (no horizontal reductions).
template <bool kValid, bool kBase2>
void softmax_columns_16(float* s, int nk, __mmask16 cm, __m512 vscale, float* m, float* l, float* alpha,
                        const int32_t* valid) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i limit = kValid ? _mm512_maskz_loadu_epi32(cm, valid) : _mm512_setzero_si512();
  auto visible = [&](int j) { return _mm512_cmpgt_epi32_mask(limit, _mm512_set1_epi32(j)); };
  __m512 vmax = ninf;
  for (int j = 0; j < nk; ++j) {
    const __m512 x = _mm512_mul_ps(_mm512_load_ps(s + j * kPanel), vscale);
    vmax = kValid ? _mm512_mask_max_ps(vmax, visible(j), vmax, x) : _mm512_max_ps(vmax, x);
  }
  const __m512 m_old = _mm512_mask_loadu_ps(ninf, cm, m);
  const __m512 m_new = _mm512_max_ps(m_old, vmax);
  // exp(m − m'): 0 where m was −∞, exactly 1 where the maximum did not grow (exp16(0) = 1).
  const __mmask16 seen = _mm512_cmp_ps_mask(m_old, ninf, _CMP_NEQ_OQ);
  const __m512 a = _mm512_maskz_mov_ps(
      seen, kBase2 ? exp2_nonpositive(_mm512_sub_ps(m_old, m_new)) : exp16(_mm512_sub_ps(m_old, m_new)));
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < nk; ++j) {
    __m512 e = kBase2 ? exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(s + j * kPanel), vscale, m_new))
                      : exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_load_ps(s + j * kPanel), vscale), m_new));
    if constexpr (kValid) e = _mm512_maskz_mov_ps(visible(j), e);
    _mm512_store_ps(s + j * kPanel, e);
    sum = _mm512_add_ps(sum, e);
  }
  _mm512_mask_storeu_ps(l, cm, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(cm, l), a, sum));
  _mm512_mask_storeu_ps(m, cm, m_new);
  _mm512_mask_storeu_ps(alpha, cm, a);
}

template <bool kBase2>
void softmax_columns_with(float* s, int nk, int n, float scale, float* m, float* l, float* alpha,
                          const int32_t* valid) {
  const __m512 vscale = _mm512_set1_ps(kBase2 ? scale * 1.44269504088896341f : scale);
  for (int c = 0; c < n; c += 16) {
    const __mmask16 cm = n - c >= 16 ? __mmask16(0xFFFF) : tail_mask16(n - c);
    if (valid)
      softmax_columns_16<true, kBase2>(s + c, nk, cm, vscale, m + c, l + c, alpha + c, valid + c);
    else
      softmax_columns_16<false, kBase2>(s + c, nk, cm, vscale, m + c, l + c, alpha + c, nullptr);
  }
}

void softmax_columns(float* s, int nk, int n, float scale, float* m, float* l, float* alpha,
                     const int32_t* valid) {
  softmax_columns_with<false>(s, nk, n, scale, m, l, alpha, valid);
}

}  // namespace

void softmax_columns_base2_avx512(float* s, int nk, int n, float scale, float* m, float* l, float* alpha,
                                  const int32_t* valid) {
  softmax_columns_with<true>(s, nk, n, scale, m, l, alpha, valid);
}

void pack_probability_pairs_avx512(const float* s, int nk, uint16_t* p) {
  alignas(64) uint16_t lo[32], hi[32];
  for (int q = 0; q < 16; ++q) {  // (row 2r, row 2r + 1) of column q, then of column 16 + q
    lo[2 * q] = static_cast<uint16_t>(q), lo[2 * q + 1] = static_cast<uint16_t>(32 + q);
    hi[2 * q] = static_cast<uint16_t>(16 + q), hi[2 * q + 1] = static_cast<uint16_t>(48 + q);
  }
  const __m512i lo_idx = _mm512_load_si512(lo), hi_idx = _mm512_load_si512(hi);
  for (int r = 0; 2 * r < nk; ++r) {
    const float* a = s + 2 * r * kPanel;
    const __m512i even = (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(a + 16), _mm512_load_ps(a));
    const __m512i odd = 2 * r + 1 < nk
                            ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(a + 48), _mm512_load_ps(a + 32))
                            : _mm512_setzero_si512();
    _mm512_store_si512(p + r * kPairRow, _mm512_permutex2var_epi16(even, lo_idx, odd));
    _mm512_store_si512(p + r * kPairRow + kPanel, _mm512_permutex2var_epi16(even, hi_idx, odd));
  }
}

namespace {

// softmax_update writing bf16 probabilities: the rounding is fused into the exp pass.
template <__m256i (*Round)(__m512i)>
float softmax_update_bf16_with(float* s, int n, float scale, float* m, float* l, uint16_t* p) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const float m_new = std::max(*m, scaled_row_max(s, n, vscale));
  const float alpha = softmax_rescale(*m, m_new);
  const __m512 vm = _mm512_set1_ps(m_new);
  const __mmask16 tail = tail_mask16(n);
  __m512 sum = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s + i), vscale), vm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), Round(_mm512_castps_si512(e)));
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    const __m512 e = _mm512_maskz_mov_ps(
        tail, exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + i), vscale), vm)));
    _mm256_mask_storeu_epi16(p + i, tail, Round(_mm512_castps_si512(e)));
    sum = _mm512_add_ps(sum, e);
  }
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  *m = m_new;
  return alpha;
}

float softmax_update_bf16(float* s, int n, float scale, float* m, float* l, uint16_t* p) {
  return softmax_update_bf16_with<round_to_bf16>(s, n, scale, m, l, p);
}

}  // namespace

void to_bf16_avx512(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), round_to_bf16(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, round_to_bf16(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

// The VDPBF16PS path's softmax step, in base 2: this function keeps m in units of log2(e)
// (m = max of s·scale·log2e), so that one fused s·c − m feeds exp2 directly; only alpha and l
// reach the caller, and they mean what they mean in softmax_update. The row maximum is taken on
// s itself: s ↦ round(s·c) is monotonic, so max(round(s·c)) = round(max(s)·c).
float softmax_update_bf16_avx512_dot(float* s, int n, float scale, float* m, float* l, uint16_t* p) {
  const float ninf_f = -std::numeric_limits<float>::infinity();
  const float c = scale * 1.44269504088896341f;
  const __m512 ninf = _mm512_set1_ps(ninf_f);
  __m512 vmax = ninf;
  int i = 0;
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + i));
  const __mmask16 tail = tail_mask16(n);
  if (i < n) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, tail, s + i));
  const float m_new = std::max(*m, _mm512_reduce_max_ps(vmax) * c);
  const float alpha = softmax_rescale(*m, m_new, /*base2=*/true);
  const __m512 vm = _mm512_set1_ps(m_new), vc = _mm512_set1_ps(c);
  __m512 sum = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = exp2_nonpositive(_mm512_fmsub_ps(_mm512_loadu_ps(s + i), vc, vm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), round_to_bf16_dot(_mm512_castps_si512(e)));
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    const __m512 e = _mm512_maskz_mov_ps(
        tail, exp2_nonpositive(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(tail, s + i), vc, vm)));
    _mm256_mask_storeu_epi16(p + i, tail, round_to_bf16_dot(_mm512_castps_si512(e)));
    sum = _mm512_add_ps(sum, e);
  }
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  *m = m_new;
  return alpha;
}

void to_bf16_avx512_dot(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), round_to_bf16_dot(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, round_to_bf16_dot(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

const VecMath& vec_math_avx512() {
  static const VecMath v{&silu,     &gelu_tanh,           &quick_gelu,     &softmax_update,
                         &gelu_erf, &softmax_update_bf16, &softmax_columns};
  return v;
}

}  // namespace octodiff::kernels::detail
