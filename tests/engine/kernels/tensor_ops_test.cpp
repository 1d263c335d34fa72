#include "kernels/tensor_ops.h"

#include "kernel_test_util.h"

namespace octodiff::kernels::test {
namespace {

TEST(TensorOps, LayoutRoundTrip) {
  const int64_t N = 2, C = 5, H = 3, W = 7;
  auto x = random_vec(N * C * H * W, 61);
  std::vector<float> nhwc(x.size()), back(x.size());
  nchw_to_nhwc(x.data(), N, C, H, W, nhwc.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          ASSERT_EQ(nhwc[((n * H + h) * W + w) * C + c], x[((n * C + c) * H + h) * W + w]);
  nhwc_to_nchw(nhwc.data(), N, H, W, C, back.data());
  EXPECT_EQ(back, x);
}

TEST(TensorOps, NearestUpsample) {
  const int64_t N = 2, H = 3, W = 4, C = 5;
  auto x = random_vec(N * H * W * C, 62);
  std::vector<float> y(N * 4 * H * W * C);
  upsample_nearest2x_nhwc(x.data(), N, H, W, C, y.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < 2 * H; ++i)
      for (int64_t j = 0; j < 2 * W; ++j)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(y[((n * 2 * H + i) * 2 * W + j) * C + c], x[((n * H + i / 2) * W + j / 2) * C + c]);
}

TEST(TensorOps, ConcatChannels) {
  const int64_t P = 11, Ca = 3, Cb = 37;
  auto a = random_vec(P * Ca, 63), b = random_vec(P * Cb, 64);
  std::vector<float> y(P * (Ca + Cb));
  concat_channels_nhwc(a.data(), Ca, b.data(), Cb, P, y.data());
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t c = 0; c < Ca; ++c) ASSERT_EQ(y[p * (Ca + Cb) + c], a[p * Ca + c]);
    for (int64_t c = 0; c < Cb; ++c) ASSERT_EQ(y[p * (Ca + Cb) + Ca + c], b[p * Cb + c]);
  }
}

}  // namespace
}  // namespace octodiff::kernels::test
