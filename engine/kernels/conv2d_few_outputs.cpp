// A convolution into few output channels (an autoencoder's last layer: 64 or 128 channels into
// the 3 of an image; the UNet's conv_out: 4) as one dot product per output pixel and channel,
// vectorised over the input channels (conv2d_few_outputs.h). The implicit GEMM of conv2d.cpp
// spreads the output channels over its 16-lane columns and its 32-column panels, so with 3 of
// them 29 of every 32 products it computes are padding: TAESD's last convolution (64 → 3 at
// 512×512) took as long as one of its 64 → 64 ones.
//
// The weight is read back from its packed panels once per call (Co·kh·kw·Ci floats). A bf16
// weight's products take the input rounded to bf16 as the GEMM's do (to_bf16_fn), one input row
// at a time into a ring of kh rows per thread; a product of two bf16 values is exact in float32,
// so they are summed by the same FMAs as float32 products.
#include "kernels/conv2d_few_outputs.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels::detail {
namespace {

// 16 lanes as scalars: the portable path, the same operations as the SIMD files'.
struct Lanes16 {
  float v[16];
  static Lanes16 zero() { return {}; }
  static Lanes16 load(const float* p) {
    Lanes16 x;
    std::memcpy(x.v, p, sizeof x.v);
    return x;
  }
  static Lanes16 fma(const Lanes16& a, const Lanes16& b, const Lanes16& c) {
    Lanes16 x;
    for (int l = 0; l < 16; ++l) x.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return x;
  }
  static float sum(const Lanes16& x) {
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; ++i) s8[i] = x.v[i] + x.v[i + 8];
    for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
  }
};

void few_outputs_row_generic(const FewOutputsRow& r, int out_channels) {
  few_outputs_row<Lanes16>(r, out_channels);
}

using RowFn = void (*)(const FewOutputsRow&, int);
RowFn row_fn(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return &few_outputs_row_avx512;
    case Isa::Avx2:
      return &few_outputs_row_avx2;
    default:
      return &few_outputs_row_generic;
  }
}

// The packed weight as [co][tap][ci] floats (pack_conv2d's matrix row k = tap·Ci + ci, column co;
// internal.h's panel layouts, one panel since Co ≤ kPanel).
std::vector<float> unpacked_weight(const Conv2dWeights& w) {
  const int64_t Co = w.out_channels, K = w.packed.K();
  std::vector<float> out(static_cast<size_t>(Co * K));
  const bool bf16 = w.packed.precision() == Precision::BF16;
  for (int64_t co = 0; co < Co; ++co)
    for (int64_t k = 0; k < K; ++k) {
      out[static_cast<size_t>(co * K + k)] =
          bf16 ? bf16_to_f32(w.packed.bf16_data()[(k / 2) * kPairRow + 2 * co + k % 2])
               : w.packed.data()[k * kPanel + co];
    }
  return out;
}

// The input rows a thread's output rows read, rounded to bf16 (as floats) once each: a ring of kh
// rows, input row (n, iy) in slot (n·H + iy) mod kh — the kh rows an output row reads are
// consecutive, so they never share a slot.
class RoundedRows {
 public:
  RoundedRows(const float* x, int64_t H, int64_t W, int64_t Ci, int kh, ToBf16Fn convert)
      : x_(x),
        H_(H),
        length_(W * Ci),
        convert_(convert),
        tags_(static_cast<size_t>(kh), -1),
        rows_(static_cast<size_t>(kh * length_) * sizeof(float)),
        halves_(static_cast<size_t>(length_) * sizeof(uint16_t)) {}

  const float* get(int64_t n, int64_t iy) {
    const int64_t key = n * H_ + iy;
    const size_t slot = static_cast<size_t>(key % static_cast<int64_t>(tags_.size()));
    float* row = rows_.get<float>() + slot * length_;
    if (tags_[slot] != key) {
      uint16_t* h = halves_.get<uint16_t>();
      convert_(x_ + key * length_, length_, h);
      for (int64_t i = 0; i < length_; ++i) row[i] = bf16_to_f32(h[i]);
      tags_[slot] = key;
    }
    return row;
  }

 private:
  const float* x_;
  int64_t H_, length_;
  ToBf16Fn convert_;
  std::vector<int64_t> tags_;
  CallScratch rows_, halves_;
};

}  // namespace

bool conv2d_few_outputs_applies(const Conv2dWeights& w) {
  const bool split = w.packed.precision() == Precision::BF16 && bf16_activations() == Bf16Activations::Split;
  return w.algorithm == ConvAlgorithm::Direct && w.out_channels <= kFewOutputChannels &&
         w.in_channels % 16 == 0 && !split;
}

void conv2d_few_outputs(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w,
                        const Conv2dGeometry& g, int64_t Ho, int64_t Wo, float* y, const float* residual,
                        bool relu) {
  const std::vector<float> weight = unpacked_weight(w);
  const int64_t Ci = w.in_channels, Co = w.out_channels;
  const bool bf16 = w.packed.precision() == Precision::BF16;
  const ToBf16Fn convert = bf16 ? to_bf16_fn(kernel_isa(), kernel_bf16_instructions()) : nullptr;
  const RowFn fn = row_fn(kernel_isa());
  parallel_for(N * Ho, [&](int64_t m0, int64_t m1) {
    std::optional<RoundedRows> rounded;
    if (bf16) rounded.emplace(x, H, W, Ci, w.kh, convert);
    std::vector<const float*> rows(static_cast<size_t>(w.kh));
    FewOutputsRow r;
    r.rows = rows.data();
    r.W = W;
    r.Ci = Ci;
    r.Wo = Wo;
    r.kh = w.kh;
    r.kw = w.kw;
    r.stride = g.stride;
    r.pad_left = g.pad_left;
    r.weight = weight.data();
    r.bias = w.bias.empty() ? nullptr : w.bias.data();
    r.relu = relu;
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t n = m / Ho, oy = m % Ho;
      for (int ky = 0; ky < w.kh; ++ky) {
        const int64_t iy = oy * g.stride - g.pad_top + ky;
        const bool inside = iy >= 0 && iy < H;
        rows[static_cast<size_t>(ky)] =
            !inside ? nullptr : (bf16 ? rounded->get(n, iy) : x + (n * H + iy) * W * Ci);
      }
      const int64_t next_iy = (oy + 1) * g.stride - g.pad_top + w.kh - 1;
      r.next = oy + 1 < Ho && next_iy >= 0 && next_iy < H ? x + (n * H + next_iy) * W * Ci : nullptr;
      r.y = y + m * Wo * Co;
      r.residual = residual ? residual + m * Wo * Co : nullptr;
      fn(r, static_cast<int>(Co));
    }
  });
}

}  // namespace octodiff::kernels::detail
