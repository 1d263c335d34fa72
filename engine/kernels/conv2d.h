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

struct Conv2dWeights {
  int64_t out_channels = 0, in_channels = 0;
  int kh = 0, kw = 0;
  PackedMatrix packed;      // implementation-defined packing of the OIHW weight
  std::vector<float> bias;  // out_channels values, or empty
};

struct Conv2dGeometry {
  int stride = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  static Conv2dGeometry same(int k) { return {1, k / 2, k / 2, k / 2, k / 2}; }
};

// w: OIHW (out, in, kh, kw) row-major; bias: out values or nullptr. BF16 packs the weight as
// bfloat16 and computes the products in bf16 (gemm.h); the bias stays float32.
Conv2dWeights pack_conv2d(const float* w, const float* bias, int64_t out_channels, int64_t in_channels,
                          int kh, int kw, Precision precision = Precision::F32);

int64_t conv2d_out_size(int64_t in, int k, int stride, int pad_before, int pad_after);

// x: N × H × W × Ci. y: N × Ho × Wo × Co. residual (optional): same shape as y, added at the end.
void conv2d_nhwc(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w,
                 const Conv2dGeometry& g, float* y, const float* residual = nullptr);

}  // namespace octodiff::kernels
