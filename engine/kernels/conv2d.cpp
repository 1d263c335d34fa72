// Convolution as an implicit GEMM: rows are output pixels (all images), K runs over
// (tap, input channel), the weight is packed once as a (kh·kw·Ci) × Co matrix. The GEMM driver
// asks for blocks of A; this source gathers them from the NHWC input (zeros outside the image),
// so only an L2-sized block of the im2col matrix ever exists.
#include "kernels/conv2d.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/activations.h"
#include "kernels/internal.h"
#include "kernels/isa.h"
#include "kernels/tensor_ops.h"

namespace octodiff::kernels {
namespace {

class ConvSource final : public detail::ASource {
 public:
  // x16: the same input already rounded to bf16 (for bf16 weights), or null.
  ConvSource(const float* x, const uint16_t* x16, int64_t H, int64_t W, int64_t Ci, int64_t Ho, int64_t Wo,
             int kh, int kw, const Conv2dGeometry& g)
      : x_(x), x16_(x16), H_(H), W_(W), Ci_(Ci), Ho_(Ho), Wo_(Wo), kw_(kw), g_(g) {
    (void)kh;
  }

  const float* rows(int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* scratch,
                    int64_t* lda) const override {
    const int64_t ld = detail::scratch_lda(kc);
    *lda = ld;
    for_each_run(i0, mc, k0, kc, [&](int64_t r, int64_t kk, int64_t at, int64_t run) {
      float* dst = scratch + r * ld + (kk - k0);
      if (at >= 0) {
        std::memcpy(dst, x_ + at, run * sizeof(float));
      } else {
        std::memset(dst, 0, run * sizeof(float));
      }
    });
    return scratch;
  }
  bool needs_scratch() const override { return true; }
  bool cheap_rows() const override { return false; }

  // The same gather from the bf16 copy of the input (or rounding on the way without one).
  void rows_bf16(int64_t i0, int64_t mc, int64_t k0, int64_t kc, detail::ToBf16Fn convert, uint16_t* dst0,
                 int64_t ld) const override {
    for_each_run(i0, mc, k0, kc, [&](int64_t r, int64_t kk, int64_t at, int64_t run) {
      uint16_t* dst = dst0 + r * ld + (kk - k0);
      if (at < 0) {
        std::memset(dst, 0, run * sizeof(uint16_t));
      } else if (x16_) {
        std::memcpy(dst, x16_ + at, run * sizeof(uint16_t));
      } else {
        convert(x_ + at, run, dst);
      }
    });
    if (kc % 2)
      for (int64_t r = 0; r < mc; ++r) dst0[r * ld + kc] = 0;
  }

 private:
  // Walks the im2col rows [i0, i0 + mc) × columns [k0, k0 + kc) as runs of consecutive input
  // channels of one tap: fn(row, first column, input offset or -1 in the padding, length).
  template <typename Fn>
  void for_each_run(int64_t i0, int64_t mc, int64_t k0, int64_t kc, Fn fn) const {
    for (int64_t r = 0; r < mc; ++r) {
      const int64_t m = i0 + r;
      const int64_t n = m / (Ho_ * Wo_), oy = (m / Wo_) % Ho_, ox = m % Wo_;
      const int64_t iy0 = oy * g_.stride - g_.pad_top, ix0 = ox * g_.stride - g_.pad_left;
      int64_t k = k0;
      while (k < k0 + kc) {
        const int64_t tap = k / Ci_, c = k % Ci_;
        const int64_t run = std::min(Ci_ - c, k0 + kc - k);
        const int64_t iy = iy0 + tap / kw_, ix = ix0 + tap % kw_;
        const bool inside = iy >= 0 && iy < H_ && ix >= 0 && ix < W_;
        fn(r, k, inside ? ((n * H_ + iy) * W_ + ix) * Ci_ + c : int64_t{-1}, run);
        k += run;
      }
    }
  }

  const float* x_;
  const uint16_t* x16_;
  int64_t H_, W_, Ci_, Ho_, Wo_;
  int kw_;
  Conv2dGeometry g_;
};

}  // namespace

namespace {

const char* winograd_environment() {
  const char* v = std::getenv("OCTODIFF_CONV_WINOGRAD");
  return v ? v : "";
}

bool winograd_from_environment() {
  const std::string s = winograd_environment();
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

std::atomic<bool>& winograd_enabled() {
  static std::atomic<bool> enabled{winograd_from_environment()};
  return enabled;
}

bool large_tiles_allowed() {
  static const bool allowed = std::string(winograd_environment()) != "2x2";
  return allowed;
}

thread_local int64_t t_winograd_max_out = 640, t_winograd_min_out = 0, t_large_tiles_max_out = 0;

// What the Winograd kernel can compute: 3×3 weights, channels in whole 16-lane vectors.
bool winograd_supports(int64_t out_channels, int64_t in_channels, int kh, int kw) {
  return kh == 3 && kw == 3 && in_channels >= 16 && in_channels % 16 == 0 && out_channels >= 16 &&
         out_channels % 16 == 0;
}

}  // namespace

void set_conv_winograd(bool enabled) { winograd_enabled() = enabled; }

ScopedWinogradLimit::ScopedWinogradLimit(int64_t max_out_channels, int64_t min_out_channels)
    : previous_max_(t_winograd_max_out), previous_min_(t_winograd_min_out) {
  t_winograd_max_out = std::min(previous_max_, max_out_channels);
  t_winograd_min_out = std::max(previous_min_, min_out_channels);
}
ScopedWinogradLimit::~ScopedWinogradLimit() {
  t_winograd_max_out = previous_max_;
  t_winograd_min_out = previous_min_;
}

ScopedLargeWinogradTiles::ScopedLargeWinogradTiles(int64_t max_out_channels) : previous_(t_large_tiles_max_out) {
  t_large_tiles_max_out = max_out_channels;
}
ScopedLargeWinogradTiles::~ScopedLargeWinogradTiles() { t_large_tiles_max_out = previous_; }

ConvAlgorithm conv2d_algorithm(int64_t out_channels, int64_t in_channels, int kh, int kw, const Conv2dGeometry& g,
                               Precision precision) {
  const bool fits = winograd_supports(out_channels, in_channels, kh, kw) && g == Conv2dGeometry::same(3) &&
                    out_channels <= t_winograd_max_out && out_channels >= t_winograd_min_out;
  if (!fits || !winograd_enabled()) return ConvAlgorithm::Direct;
  const bool large = precision == Precision::F32 && out_channels <= t_large_tiles_max_out && large_tiles_allowed();
  return large ? ConvAlgorithm::Winograd4x4 : ConvAlgorithm::Winograd;
}

ConvAlgorithm conv2d_upsample2x_algorithm(int64_t out_channels, int64_t in_channels, Precision precision) {
  const ConvAlgorithm plain =
      conv2d_algorithm(out_channels, in_channels, 3, 3, Conv2dGeometry::same(3), precision);
  const bool fused =
      plain != ConvAlgorithm::Direct && out_channels <= t_large_tiles_max_out && large_tiles_allowed();
  return fused ? ConvAlgorithm::WinogradUpsample2x : plain;
}

int64_t conv2d_packed_rows(int64_t in_channels, int kh, int kw, ConvAlgorithm algorithm) {
  if (algorithm == ConvAlgorithm::Direct) return in_channels * kh * kw;
  return detail::winograd_positions(algorithm) * in_channels;
}

int64_t conv2d_packed_columns(int64_t out_channels, ConvAlgorithm algorithm) {
  return algorithm == ConvAlgorithm::WinogradUpsample2x ? 4 * out_channels : out_channels;
}

Conv2dWeights pack_conv2d(const float* w, const float* bias, int64_t out_channels, int64_t in_channels,
                          int kh, int kw, Precision precision, ConvAlgorithm algorithm) {
  if (out_channels <= 0 || in_channels <= 0 || kh <= 0 || kw <= 0)
    fail(cat("pack_conv2d: bad weight shape (", out_channels, ", ", in_channels, ", ", kh, ", ", kw, ")"));
  Conv2dWeights cw;
  cw.out_channels = out_channels;
  cw.in_channels = in_channels;
  cw.kh = kh;
  cw.kw = kw;
  cw.algorithm = algorithm;
  if (bias) cw.bias.assign(bias, bias + out_channels);
  if (algorithm != ConvAlgorithm::Direct) {
    if (!winograd_supports(out_channels, in_channels, kh, kw))
      fail(cat("pack_conv2d: Winograd needs a 3x3 weight with channels in multiples of 16, not (", out_channels,
               ", ", in_channels, ", ", kh, ", ", kw, ")"));
    if (algorithm == ConvAlgorithm::Winograd4x4 && precision != Precision::F32)
      fail("pack_conv2d: Winograd F(4x4, 3x3) is for float32 weights only");
    // Transformed one panel at a time into the packer's scratch, like the reorder below: the whole
    // transformed weight (16/9 or 4× the weight) was a fresh allocation per convolution.
    auto rows = [w, in_channels, out_channels, algorithm](int64_t n0, int64_t n,
                                                          float* scratch) -> const float* {
      detail::winograd_weight_rows(algorithm, w, in_channels, out_channels, n0, n, scratch);
      return scratch;
    };
    cw.packed = detail::pack_b_panels(conv2d_packed_rows(in_channels, kh, kw, algorithm),
                                      conv2d_packed_columns(out_channels, algorithm), rows, precision);
    return cw;
  }
  // B[(ty·kw + tx)·Ci + ci][co] = w[co][ci][ty][tx]: W's row co read tap-major.
  const int64_t K = in_channels * kh * kw;
  cw.packed = detail::pack_b_strided(K, out_channels, {w, K, in_channels, int64_t{kh} * kw}, precision);
  return cw;
}

int64_t conv2d_out_size(int64_t in, int k, int stride, int pad_before, int pad_after) {
  return (in + pad_before + pad_after - k) / stride + 1;
}

void conv2d_nhwc(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w,
                 const Conv2dGeometry& g, float* y, const float* residual, bool relu) {
  if (w.packed.empty()) fail("conv2d: weights were never packed");
  if (g.stride < 1) fail(cat("conv2d: stride ", g.stride));
  if (g.pad_top < 0 || g.pad_left < 0 || g.pad_bottom < 0 || g.pad_right < 0) fail("conv2d: negative padding");
  const int64_t Ho = conv2d_out_size(H, w.kh, g.stride, g.pad_top, g.pad_bottom);
  const int64_t Wo = conv2d_out_size(W, w.kw, g.stride, g.pad_left, g.pad_right);
  if (Ho <= 0 || Wo <= 0) fail(cat("conv2d: ", H, "x", W, " input is smaller than the ", w.kh, "x", w.kw, " kernel"));
  if (w.algorithm == ConvAlgorithm::WinogradUpsample2x)
    fail("internal: a weight packed for conv2d_upsample2x_nhwc applied by conv2d_nhwc");
  if (w.algorithm != ConvAlgorithm::Direct) {
    if (!(g == Conv2dGeometry::same(3))) fail("internal: a Winograd conv2d weight applied with another geometry");
    return detail::conv2d_winograd(x, N, H, W, w, y, residual, relu);
  }
  if (detail::conv2d_few_outputs_applies(w))
    return detail::conv2d_few_outputs(x, N, H, W, w, g, Ho, Wo, y, residual, relu);
  Epilogue ep;
  ep.bias = w.bias.empty() ? nullptr : w.bias.data();
  ep.residual = residual;
  ep.ldr = w.out_channels;
  const int64_t M = N * Ho * Wo;
  const bool pointwise = w.kh == 1 && w.kw == 1 && g.stride == 1 && g.pad_top == 0 && g.pad_left == 0 &&
                         g.pad_bottom == 0 && g.pad_right == 0;
  if (pointwise) {
    detail::run_gemm(detail::DirectA(x, w.in_channels), M, w.packed, y, w.out_channels, ep);
  } else if (w.packed.precision() == Precision::BF16 && bf16_activations() == Bf16Activations::Rounded) {
    // Each input element enters kh·kw taps: round the input to bf16 once, not once per tap
    // (same values, half the bytes to gather). Split activations gather from x itself.
    const int64_t Ci = w.in_channels;
    const detail::CallScratch buffer(static_cast<size_t>(N * H * W * Ci) * sizeof(uint16_t));
    uint16_t* x16 = buffer.get<uint16_t>();
    const detail::ToBf16Fn convert = detail::to_bf16_fn(kernel_isa(), kernel_bf16_instructions());
    parallel_for(N * H, [&](int64_t r0, int64_t r1) {
      convert(x + r0 * W * Ci, (r1 - r0) * W * Ci, x16 + r0 * W * Ci);
    });
    const ConvSource src(x, x16, H, W, Ci, Ho, Wo, w.kh, w.kw, g);
    detail::run_gemm(src, M, w.packed, y, w.out_channels, ep);
  } else {
    const ConvSource src(x, nullptr, H, W, w.in_channels, Ho, Wo, w.kh, w.kw, g);
    detail::run_gemm(src, M, w.packed, y, w.out_channels, ep);
  }
  if (relu) kernels::relu(y, M * w.out_channels, y);
}

void conv2d_upsample2x_nhwc(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w, float* y,
                            const float* residual, bool relu) {
  if (w.packed.empty()) fail("conv2d: weights were never packed");
  if (w.kh != 3 || w.kw != 3) fail(cat("conv2d_upsample2x: a ", w.kh, "x", w.kw, " weight (3x3 only)"));
  if (N <= 0 || H <= 0 || W <= 0) fail(cat("conv2d_upsample2x: an empty ", N, "x", H, "x", W, " input"));
  if (w.algorithm == ConvAlgorithm::WinogradUpsample2x)
    return detail::conv2d_winograd(x, N, H, W, w, y, residual, relu);
  const detail::CallScratch up(static_cast<size_t>(N * 4 * H * W * w.in_channels) * sizeof(float));
  upsample_nearest2x_nhwc(x, N, H, W, w.in_channels, up.get<float>());
  conv2d_nhwc(up.get<float>(), N, 2 * H, 2 * W, w, Conv2dGeometry::same(3), y, residual, relu);
}

}  // namespace octodiff::kernels
