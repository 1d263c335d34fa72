// Layout and resampling helpers on NHWC/NCHW activations.
#pragma once

#include <cstdint>

namespace octodiff::kernels {

void nchw_to_nhwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, float* y);
void nhwc_to_nchw(const float* x, int64_t N, int64_t H, int64_t W, int64_t C, float* y);

// Nearest-neighbour 2× upsampling: y[n, i, j, c] = x[n, i/2, j/2, c]; y is N × 2H × 2W × C.
void upsample_nearest2x_nhwc(const float* x, int64_t N, int64_t H, int64_t W, int64_t C, float* y);

// Channel concatenation [a, b] of two NHWC tensors with P = N·H·W pixels.
void concat_channels_nhwc(const float* a, int64_t Ca, const float* b, int64_t Cb, int64_t P, float* y);

}  // namespace octodiff::kernels
