// Weight packing on AVX-512, one panel (32 rows of a transposed B) at a time, 16 k at a time:
// each row's 16 values are read where they lie (for a conv weight, read tap-major, through a
// 16×16 transpose of the row's values: neighbouring k are `taps` floats apart), rounded for bf16
// if asked, and 16×16 blocks of 32-bit words are transposed in registers into the panel, with
// non-temporal stores: a packed weight is fresh memory that nothing reads soon, and a normal
// store first read every line from memory (a warm full-size first load's median went from 1.72
// to 1.46 s in bf16 and from 1.91 to 1.67 s in f32 with them).
// The generic packers reorder a conv weight row by row into a scratch bigger than L2, then round
// it and transpose it word by word. Measured with octodiff-kernel-bench's BM_PackWeight* (the
// generic path under OCTODIFF_ISA=avx2 in brackets): a 1280×1280×3×3 weight packs in 5.9–8.0 ms
// in bf16 (9.6) and 6.1–8.1 ms in f32 (10.2), a 320×320×3×3 one in 0.16 ms (0.41) and 0.18 ms
// (0.29), a 10240×1280 torch weight in 4.2–5.1 ms (7.8) and 5.3 ms (6.9). The bytes are the
// generic packers' (tests: PackB.*, Conv2d.PackedWeightIsTheReorderedMatrixPacked).
#include <immintrin.h>

#include "core/half.h"
#include "kernels/bf16_avx512.h"
#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

// r[i] = row i of a 16×16 block of 32-bit words in, column i out.
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane L: rows i, i+1 at columns 4L … 4L+3, interleaved
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // r[i + c], lane L: column 4L + c of rows i … i+3
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c]
    const __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44),
                  x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i x2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i x3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    t[8 + c] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// A panel's rows, read 16 k at a time: k0 … k0+15 = tap t, groups c0 … c0+15. A conv weight
// is read one block of 16 groups at a time for all its taps (they lie in the same cache lines):
// each row's 16 groups × taps values are loaded as 16 vectors and transposed into one vector
// per tap. Tap by tap instead, a panel's 1.5 MB of rows was read from memory 9 times, and
// gathering a tap's 16 values (vpgatherdd) was slower: 11 ms against 8–9 ms for 1280×1280×3×3.
class PanelReader {
 public:
  // 32 rows are read side by side, more streams than the hardware prefetcher follows: a line
  // 256 bytes ahead in each (a torch weight), the next block of groups (a conv weight) is asked
  // for ahead (about 10 % faster, measured).
  static constexpr int kPrefetchBytes = 256;
  PanelReader(const StridedRows& b, int64_t n0, int64_t w) : b_(b), w_(w) {
    for (int64_t j = 0; j < w; ++j) rows_[j] = b.w + (n0 + j) * b.row_stride;
  }
  template <typename Block>  // block(k0), during which row16(j) gives the block's row j
  void for_each_block(Block block) {
    const __mmask16 taps = static_cast<__mmask16>((1u << b_.taps) - 1);
    for (int64_t c0 = 0; c0 + 16 <= b_.groups; c0 += 16) {
      if (b_.taps == 1) {
        off_ = c0;
        block(c0);
        continue;
      }
      for (int64_t j = 0; j < w_; ++j) {
        const char* next = reinterpret_cast<const char*>(rows_[j] + (c0 + 16) * b_.taps);
        if (c0 + 32 <= b_.groups)
          for (int64_t l = 0; l < 16 * b_.taps * 4; l += 64) _mm_prefetch(next + l, _MM_HINT_T0);
        __m512i r[16];
        for (int c = 0; c < 16; ++c) r[c] = _mm512_maskz_loadu_epi32(taps, rows_[j] + (c0 + c) * b_.taps);
        transpose16x16(r);
        for (int64_t t = 0; t < b_.taps; ++t) tap_rows_[t][j] = r[t];
      }
      for (tap_ = 0; tap_ < b_.taps; ++tap_) block(tap_ * b_.groups + c0);
    }
  }
  // The k left to the caller: the end of a torch weight's rows past the last whole block.
  int64_t tail_begin(int64_t K) const { return b_.taps == 1 ? b_.groups / 16 * 16 : K; }
  __m512i row16(int64_t j) const {  // zero past the panel's rows
    if (j >= w_) return _mm512_setzero_si512();
    if (b_.taps != 1) return tap_rows_[tap_][j];
    _mm_prefetch(reinterpret_cast<const char*>(rows_[j] + off_) + kPrefetchBytes, _MM_HINT_T0);
    return _mm512_loadu_si512(rows_[j] + off_);
  }
  float at(int64_t j, int64_t k) const { return rows_[j][k]; }  // taps = 1

 private:
  StridedRows b_;
  int64_t w_;
  const float* rows_[kPanel] = {};
  int64_t off_ = 0, tap_ = 0;
  __m512i tap_rows_[16][kPanel];
};

}  // namespace

bool panel_avx512_reads(const StridedRows& b) {
  return b.taps == 1 || (b.taps <= 16 && b.groups % 16 == 0);
}

void pack_f32_panel_avx512(const StridedRows& b, int64_t n0, int64_t w, int64_t K, float* panel) {
  PanelReader in(b, n0, w);
  in.for_each_block([&](int64_t k0) {
    for (int h = 0; h < 2; ++h) {  // rows 16h … 16h+15 of the panel
      __m512i z[16];
      for (int j = 0; j < 16; ++j) z[j] = in.row16(16 * h + j);
      transpose16x16(z);
      for (int c = 0; c < 16; ++c)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(panel + (k0 + c) * kPanel + 16 * h), z[c]);
    }
  });
  _mm_sfence();
  for (int64_t j = 0; j < w; ++j)
    for (int64_t k = in.tail_begin(K); k < K; ++k) panel[k * kPanel + j] = in.at(j, k);
}

// A row's 16 values rounded are 8 words (pairs of k); rows j and j+16 share a vector, so one
// 16×16 transpose gives the 8 pair-rows' first halves (rows 0–15) and second halves (16–31).
void pack_bf16_panel_avx512(const StridedRows& b, int64_t n0, int64_t w, int64_t K, uint16_t* panel) {
  PanelReader in(b, n0, w);
  in.for_each_block([&](int64_t k0) {
    __m512i z[16];
    for (int j = 0; j < 16; ++j)
      z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(round_to_bf16(in.row16(j))),
                                round_to_bf16(in.row16(j + 16)), 1);
    transpose16x16(z);
    uint16_t* out = panel + (k0 / 2) * kPairRow;
    for (int q = 0; q < 8; ++q) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + q * kPairRow), z[q]);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + q * kPairRow + kPairRow / 2), z[8 + q]);
    }
  });
  _mm_sfence();
  for (int64_t j = 0; j < w; ++j)
    for (int64_t k = in.tail_begin(K); k < K; ++k)
      panel[(k / 2) * kPairRow + 2 * j + k % 2] = f32_to_bf16(in.at(j, k));
}

}  // namespace octodiff::kernels::detail
