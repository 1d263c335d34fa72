// A convolution with few output channels (conv2d_few_outputs.cpp), one output row at a time, for
// the per-ISA files: the arithmetic is written once here over a 16-float vector type V that each
// file supplies (one AVX-512 register, two AVX2 ones, or 16 scalars), so every ISA computes the
// same bits. Everything here has internal linkage or is instantiated with a file's own V.
//
// V provides: V::zero(), V::load(const float*), V::fma(a, b, c) = a·b + c rounded once per lane,
// and V::sum(v): the 16 lanes added as a fixed tree — s8[i] = v[i] + v[i+8], s4[i] = s8[i] + s8[i+4],
// s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
#pragma once

#include <algorithm>
#include <cstdint>

namespace octodiff::kernels::detail {

// Output pixel ox of the row reads input columns ox·stride − pad_left + kx (kx < kw) of the kh
// input rows in `rows` (W × Ci floats each; null for a row in the padding); the weight is
// [co][tap][ci] (tap = ky·kw + kx) in float32. y and residual: the row, Wo × Co.
struct FewOutputsRow {
  const float* const* rows = nullptr;
  int64_t W = 0, Ci = 0, Wo = 0;
  int kh = 0, kw = 0, stride = 1, pad_left = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;      // Co values, or null
  const float* residual = nullptr;  // or null
  bool relu = false;
  float* y = nullptr;
  // The input row the next output row adds to its window (its last, W × Ci floats), or null:
  // fetched into L2 a piece at a time while this row computes, so that it does not wait for memory.
  const float* next = nullptr;
};

namespace few_outputs {

// kP output pixels from ox on: per pixel and output channel, 16 lane sums over (tap, channel
// chunk) in that order — lane l takes the input channels ≡ l mod 16 — each one FMA; taps in the
// padding are skipped. Then the lanes' sum (V::sum), + bias, + residual, ReLU (a < 0 ? 0 : a).
template <typename V, int kCo, int kP>
static inline void pixels(const FewOutputsRow& r, int64_t ox) {
  const int64_t Ci = r.Ci, taps = int64_t{r.kh} * r.kw;
  V acc[kP][kCo];
  for (int p = 0; p < kP; ++p)
    for (int co = 0; co < kCo; ++co) acc[p][co] = V::zero();
  // One kernel row's taps: kx = 0 … kw − 1 from input column ix0 on. Their Ci-channel runs are
  // consecutive in the input row and in the weight's [tap][ci], so a group of kP pixels (all of
  // whose taps lie inside) reads them as one run of kw·Ci; a single pixel at the edge tap by tap.
  const auto taps_run = [&](const float* x, const float* w, int64_t length) {
    for (int64_t c = 0; c < length; c += 16) {
      V xv[kP];
      for (int p = 0; p < kP; ++p) xv[p] = V::load(x + p * r.stride * Ci + c);
      for (int co = 0; co < kCo; ++co) {
        const V wv = V::load(w + co * taps * Ci + c);
        for (int p = 0; p < kP; ++p) acc[p][co] = V::fma(xv[p], wv, acc[p][co]);
      }
    }
  };
  for (int ky = 0; ky < r.kh; ++ky) {
    const float* row = r.rows[ky];
    if (!row) continue;
    const int64_t ix0 = ox * r.stride - r.pad_left;
    const float* w = r.weight + ky * r.kw * Ci;
    if (kP > 1) {  // few_outputs::row gives groups only where every tap lies inside
      taps_run(row + ix0 * Ci, w, r.kw * Ci);
      continue;
    }
    for (int kx = 0; kx < r.kw; ++kx)
      if (ix0 + kx >= 0 && ix0 + kx < r.W) taps_run(row + (ix0 + kx) * Ci, w + kx * Ci, Ci);
  }
  for (int p = 0; p < kP; ++p)
    for (int co = 0; co < kCo; ++co) {
      const int64_t at = (ox + p) * kCo + co;
      float v = V::sum(acc[p][co]);
      if (r.bias) v += r.bias[co];
      if (r.residual) v += r.residual[at];
      if (r.relu) v = v < 0.0f ? 0.0f : v;
      r.y[at] = v;
    }
}

// The row: groups of pixels whose taps all lie inside the row (4 at a time for up to 4 output
// channels, else 2, to keep the accumulators in registers), one pixel at a time at the edges.
template <typename V, int kCo>
static inline void row(const FewOutputsRow& r) {
  constexpr int kP = kCo <= 4 ? 4 : 2;
  const int64_t lines = (r.W * r.Ci * static_cast<int64_t>(sizeof(float)) + 63) / 64;
  int64_t fetched = 0;
  for (int64_t ox = 0; ox < r.Wo;) {
    if (r.next)
      for (const int64_t until = (ox + kP) * lines / r.Wo; fetched < std::min(until, lines); ++fetched)
        __builtin_prefetch(reinterpret_cast<const char*>(r.next) + fetched * 64, 0, 2);
    const int64_t first = ox * r.stride - r.pad_left, last = (ox + kP - 1) * r.stride - r.pad_left + r.kw;
    if (ox + kP <= r.Wo && first >= 0 && last <= r.W) {
      pixels<V, kCo, kP>(r, ox);
      ox += kP;
    } else {
      pixels<V, kCo, 1>(r, ox);
      ox += 1;
    }
  }
}

}  // namespace few_outputs

// few_outputs::row for 1 … 8 output channels.
template <typename V>
static inline void few_outputs_row(const FewOutputsRow& r, int out_channels) {
  switch (out_channels) {
    case 1:
      return few_outputs::row<V, 1>(r);
    case 2:
      return few_outputs::row<V, 2>(r);
    case 3:
      return few_outputs::row<V, 3>(r);
    case 4:
      return few_outputs::row<V, 4>(r);
    case 5:
      return few_outputs::row<V, 5>(r);
    case 6:
      return few_outputs::row<V, 6>(r);
    case 7:
      return few_outputs::row<V, 7>(r);
    default:
      return few_outputs::row<V, 8>(r);
  }
}

}  // namespace octodiff::kernels::detail
