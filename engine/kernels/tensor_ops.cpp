// Layout changes and resampling: pure copies, parallel over rows of the output.
#include "kernels/tensor_ops.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"

namespace octodiff::kernels {

void nchw_to_nhwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, float* y) {
  parallel_for(N * H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / H, h = r % H;
      float* yr = y + r * W * C;
      for (int64_t c = 0; c < C; ++c) {
        const float* xr = x + ((n * C + c) * H + h) * W;
        for (int64_t w = 0; w < W; ++w) yr[w * C + c] = xr[w];
      }
    }
  });
}

void nhwc_to_nchw(const float* x, int64_t N, int64_t H, int64_t W, int64_t C, float* y) {
  parallel_for(N * C, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / C, c = r % C;
      float* yr = y + r * H * W;
      const float* xn = x + n * H * W * C + c;
      for (int64_t p = 0; p < H * W; ++p) yr[p] = xn[p * C];
    }
  });
}

void upsample_nearest2x_nhwc(const float* x, int64_t N, int64_t H, int64_t W, int64_t C, float* y) {
  parallel_for(N * H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * W * C;
      float* y0 = y + 2 * r * (2 * W) * C;
      for (int64_t w = 0; w < W; ++w) {
        std::memcpy(y0 + (2 * w) * C, xr + w * C, C * sizeof(float));
        std::memcpy(y0 + (2 * w + 1) * C, xr + w * C, C * sizeof(float));
      }
      std::memcpy(y0 + 2 * W * C, y0, 2 * W * C * sizeof(float));
    }
  });
}

void concat_channels_nhwc(const float* a, int64_t Ca, const float* b, int64_t Cb, int64_t P, float* y) {
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, Ca + Cb));
  parallel_for(P, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      std::memcpy(y + p * (Ca + Cb), a + p * Ca, Ca * sizeof(float));
      std::memcpy(y + p * (Ca + Cb) + Ca, b + p * Cb, Cb * sizeof(float));
    }
  }, grain);
}

}  // namespace octodiff::kernels
