// 2-D convolution (cross-correlation, like torch/Flax) on NHWC activations.
//
// Weights arrive in torch's OIHW layout and are packed once. The kernel computes the 3×3 and
// 1×1 convolutions of the UNet and VAE, strides 1 and 2, with per-side zero padding (the VAE's
// downsample pads only bottom/right), without materialising a full im2col copy.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm.h"

namespace octodiff::kernels {

struct Conv2dGeometry {
  int stride = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  static Conv2dGeometry same(int k) { return {1, k / 2, k / 2, k / 2, k / 2}; }
  bool operator==(const Conv2dGeometry&) const = default;
};

// Direct: an implicit GEMM over (tap, input channel), exact to float32 rounding of each sum.
// Winograd F(2×2, 3×3): each 4×4 input tile is transformed (Bᵀ d B), multiplied position by
// position with the transformed weight (G g Gᵀ, 16 GEMMs of K = Ci), and transformed back
// (Aᵀ m A) into a 2×2 output tile: 2.25× fewer products, and the packed weight is 16/9 the size.
// Winograd4x4, F(4×4, 3×3): 6×6 input tiles, 36 GEMMs, 4×4 output tiles: 4× fewer products and
// less data transformed per output, a packed weight 4× the size; float32 only (its transforms'
// larger coefficients would magnify bf16 rounding). Both only for 3×3, stride 1, padding 1.
// WinogradUpsample2x: the 3×3 same convolution of a 2× nearest-upsampled image, computed on the
// image itself (conv2d_upsample2x_nhwc) as F(3×3, 2×2) on the 2×2 kernels each output sub-pixel
// sees: 1.78 products per output and input channel (F(2×2) on the upsampled image: 4), no
// upsampled copy, F(2×2)'s accuracy in every precision; a packed weight 64/9 the direct one's.
enum class ConvAlgorithm { Direct, Winograd, Winograd4x4, WinogradUpsample2x };

// What conv2d_nhwc uses for this weight, geometry and precision when the model is packed:
// Winograd for 3×3 same convolutions with 16…640 output and ≥ 16 input channels, multiples of 16
// (a model may lower the 640, ScopedWinogradLimit below) — F(4×4) for float32 weights with at most
// ScopedLargeWinogradTiles' output channels (none unless a model asks), F(2×2) otherwise —
// unless OCTODIFF_CONV_WINOGRAD=off (or set_conv_winograd(false)) asks for the direct kernel
// everywhere; OCTODIFF_CONV_WINOGRAD=2x2 keeps F(2×2) everywhere (for comparisons).
ConvAlgorithm conv2d_algorithm(int64_t out_channels, int64_t in_channels, int kh, int kw, const Conv2dGeometry& g,
                               Precision precision);
void set_conv_winograd(bool enabled);  // process-wide, for benchmarks and tests

// While one lives, conv2d_algorithm on this thread picks Winograd only for min_out_channels …
// max_out_channels output channels instead of 16 … 640 (max 0: never): a model loader's memory,
// accuracy or speed budget. Nested limits narrow the range.
class ScopedWinogradLimit {
 public:
  explicit ScopedWinogradLimit(int64_t max_out_channels, int64_t min_out_channels = 0);
  ~ScopedWinogradLimit();
  ScopedWinogradLimit(const ScopedWinogradLimit&) = delete;
  ScopedWinogradLimit& operator=(const ScopedWinogradLimit&) = delete;

 private:
  int64_t previous_max_, previous_min_;
};

// While one lives, float32 Winograd convolutions that conv2d_algorithm picks on this thread with at
// most max_out_channels outputs use F(4×4, 3×3): a model loader's choice of speed for weight
// memory (2.25× F(2×2)'s packed weight). The innermost one applies.
constexpr int64_t kEveryWinogradConv = INT64_MAX;  // ScopedLargeWinogradTiles: no channel limit
class ScopedLargeWinogradTiles {
 public:
  explicit ScopedLargeWinogradTiles(int64_t max_out_channels);
  ~ScopedLargeWinogradTiles();
  ScopedLargeWinogradTiles(const ScopedLargeWinogradTiles&) = delete;
  ScopedLargeWinogradTiles& operator=(const ScopedLargeWinogradTiles&) = delete;

 private:
  int64_t previous_;
};

// What conv2d_upsample2x_nhwc uses for a 3×3 weight when the model is packed: WinogradUpsample2x
// where conv2d_algorithm would pick Winograd and ScopedLargeWinogradTiles allows the larger weight
// (any precision; not with OCTODIFF_CONV_WINOGRAD=2x2), else what conv2d_algorithm picks.
ConvAlgorithm conv2d_upsample2x_algorithm(int64_t out_channels, int64_t in_channels, Precision precision);

// Rows (K) of the packed weight matrix for that algorithm: kh·kw·Ci, 16·Ci for Winograd and
// WinogradUpsample2x, 36·Ci for Winograd4x4; columns (N): Co, 4·Co for WinogradUpsample2x.
int64_t conv2d_packed_rows(int64_t in_channels, int kh, int kw, ConvAlgorithm algorithm);
int64_t conv2d_packed_columns(int64_t out_channels, ConvAlgorithm algorithm);

struct Conv2dWeights {
  int64_t out_channels = 0, in_channels = 0;
  int kh = 0, kw = 0;
  ConvAlgorithm algorithm = ConvAlgorithm::Direct;
  PackedMatrix packed;      // implementation-defined packing of the OIHW weight
  std::vector<float> bias;  // out_channels values, or empty
};

// w: OIHW (out, in, kh, kw) row-major; bias: out values or nullptr. BF16 packs the weight as
// bfloat16 and computes the products in bf16 (gemm.h); the bias stays float32. Winograd needs a
// 3×3 weight with both channel counts multiples of 16 (fails otherwise).
Conv2dWeights pack_conv2d(const float* w, const float* bias, int64_t out_channels, int64_t in_channels,
                          int kh, int kw, Precision precision = Precision::F32,
                          ConvAlgorithm algorithm = ConvAlgorithm::Direct);

int64_t conv2d_out_size(int64_t in, int k, int stride, int pad_before, int pad_after);

// x: N × H × W × Ci. y: N × Ho × Wo × Co. residual (optional): same shape as y, added at the end.
// relu: y = relu(conv + bias + residual), as kernels::relu (NaN stays NaN): fused into the output
// transform of a Winograd convolution (no second pass over y), one pass over y otherwise.
// A Winograd weight must be applied with Conv2dGeometry::same(3).
void conv2d_nhwc(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w,
                 const Conv2dGeometry& g, float* y, const float* residual = nullptr, bool relu = false);

// y = conv2d(upsample_nearest2x(x)) with Conv2dGeometry::same(3): x N × H × W × Ci, y (and
// residual) N × 2H × 2W × Co. A WinogradUpsample2x weight never materialises the upsampled image;
// any other 3×3 weight is applied to an upsampled copy.
void conv2d_upsample2x_nhwc(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w, float* y,
                            const float* residual = nullptr, bool relu = false);

}  // namespace octodiff::kernels
