// The 3×3 convolution of a 2× nearest-upsampled image computed on the image itself
// (conv2d_upsample2x_nhwc with a WinogradUpsample2x weight, F(3×3, 2×2) on the sub-pixel kernels)
// against a double-precision direct convolution of the upsampled image: odd sizes (partial tiles
// at both edges), 1×1 images, batches, bias + residual, K chunks, several blocks; f32 on every ISA,
// bf16 on every bf16 path (bit-identical between them); fused ReLU equal to the separate pass;
// thread-count invariance; the plain weights' fallback; which loads get it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/activations.h"
#include "kernels/conv2d.h"
#include "kernels/tensor_ops.h"

namespace octodiff::kernels::test {
namespace {

struct Case {
  const char* name;
  int64_t N, H, W, Ci, Co;  // H × W: the image before upsampling
  bool bias, residual;
};

const Case kCases[] = {
    {"7x9 -> 14x18, 16->16", 1, 7, 9, 16, 16, true, false},
    {"batch 2, 6x5, 32->48, bias + residual", 2, 6, 5, 32, 48, true, true},
    {"1x1 image", 1, 1, 1, 16, 32, true, false},
    {"2x3 image, no bias", 1, 2, 3, 16, 16, false, false},
    {"batch 2, 17x16 (several blocks), 48->80", 2, 17, 16, 48, 80, true, true},
    {"400->64 (two K chunks)", 1, 5, 4, 400, 64, true, false},
};

struct Data {
  std::vector<float> x, w, bias, res;
  explicit Data(const Case& t)
      : x(random_vec(t.N * t.H * t.W * t.Ci, 41)),
        w(random_vec(t.Co * t.Ci * 9, 42, -0.3f, 0.3f)),
        bias(random_vec(t.Co, 43)),
        res(random_vec(t.N * 4 * t.H * t.W * t.Co, 44)) {}

  std::vector<float> upsampled(const Case& t) const {
    std::vector<float> up(static_cast<size_t>(t.N * 4 * t.H * t.W * t.Ci));
    upsample_nearest2x_nhwc(x.data(), t.N, t.H, t.W, t.Ci, up.data());
    return up;
  }
  // conv2d(upsample(x)) in double.
  std::vector<double> reference(const Case& t) const {
    return reference_conv2d(upsampled(t), w, t.N, 2 * t.H, 2 * t.W, t.Ci, t.Co, 3, Conv2dGeometry::same(3),
                            t.bias ? bias.data() : nullptr, t.residual ? res.data() : nullptr);
  }
  Conv2dWeights pack(const Case& t, Precision p, ConvAlgorithm a) const {
    return pack_conv2d(w.data(), t.bias ? bias.data() : nullptr, t.Co, t.Ci, 3, 3, p, a);
  }
};

std::vector<float> run(const Case& t, const Data& d, const Conv2dWeights& cw, bool relu = false) {
  std::vector<float> y(static_cast<size_t>(t.N * 4 * t.H * t.W * t.Co), NAN);
  conv2d_upsample2x_nhwc(d.x.data(), t.N, t.H, t.W, cw, y.data(), t.residual ? d.res.data() : nullptr, relu);
  return y;
}

TEST(WinogradUpsample, MatchesDoubleReferenceOnEveryIsa) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const Case& t : kCases) {
      const Data d(t);
      const Conv2dWeights cw = d.pack(t, Precision::F32, ConvAlgorithm::WinogradUpsample2x);
      ASSERT_EQ(cw.packed.K(), 16 * t.Ci);
      ASSERT_EQ(cw.packed.N(), 4 * t.Co);
      const auto y = run(t, d, cw);
      const double err = rel_error(y.data(), d.reference(t));
      // F(2×2, 3×3)'s points and coefficients: the same order of error (7e-7 at 400 channels there).
      EXPECT_LT(err, 1e-5) << isa_name(isa) << " " << t.name;
      std::printf("[winograd upsample f32 %s] %-42s rel err %.3g\n", isa_name(isa).c_str(), t.name, err);
    }
  }
}

TEST(WinogradUpsample, Bf16MatchesReferenceOnEveryPathBitIdentically) {
  const std::vector<Path> paths = bf16_paths();
  for (const Case& t : kCases) {
    const Data d(t);
    const Conv2dWeights fused = d.pack(t, Precision::BF16, ConvAlgorithm::WinogradUpsample2x);
    const Conv2dWeights direct = d.pack(t, Precision::BF16, ConvAlgorithm::Direct);
    const auto ref = d.reference(t);
    std::vector<float> first;
    for (const Path& path : paths) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      const auto y = run(t, d, fused);
      const double err = rel_error(y.data(), ref);
      const double direct_err = rel_error(run(t, d, direct).data(), ref);  // on an upsampled copy
      // bf16 rounds the transformed image and the summed, transformed weight instead of the image
      // and the weight: the order of the direct bf16 convolution's error.
      EXPECT_LT(err, 2e-2) << path.name() << " " << t.name;
      EXPECT_LT(err, 4 * direct_err + 1e-6) << path.name() << " " << t.name;
      std::printf("[winograd upsample bf16 %s] %-42s rel err %.3g (direct bf16 %.3g)\n", path.name().c_str(),
                  t.name, err, direct_err);
      if (first.empty()) first = y;
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
          << path.name() << " " << t.name;
    }
  }
}

// Weights packed for the plain convolution run on an upsampled copy: exactly conv2d_nhwc of it.
TEST(WinogradUpsample, PlainWeightsConvolveAnUpsampledCopy) {
  const Case t{"batch 2, 6x5, 32->48, bias + residual", 2, 6, 5, 32, 48, true, true};
  const Data d(t);
  const auto up = d.upsampled(t);
  for (ConvAlgorithm a : {ConvAlgorithm::Direct, ConvAlgorithm::Winograd, ConvAlgorithm::Winograd4x4}) {
    const Conv2dWeights cw = d.pack(t, Precision::F32, a);
    std::vector<float> expected(static_cast<size_t>(t.N * 4 * t.H * t.W * t.Co));
    conv2d_nhwc(up.data(), t.N, 2 * t.H, 2 * t.W, cw, Conv2dGeometry::same(3), expected.data(), d.res.data());
    const auto y = run(t, d, cw);
    EXPECT_EQ(0, std::memcmp(expected.data(), y.data(), y.size() * sizeof(float))) << static_cast<int>(a);
  }
}

TEST(WinogradUpsample, FusedReluIsTheSeparatePassToTheBit) {
  const Case t{"batch 2, 13x11, 48->80, bias + residual", 2, 13, 11, 48, 80, true, true};
  Data d(t);
  d.x[5 * t.Ci + 3] = NAN;  // reaches the outputs whose windows hold it
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const Conv2dWeights cw = d.pack(t, p, ConvAlgorithm::WinogradUpsample2x);
    std::vector<float> separate = run(t, d, cw);
    const auto negatives = std::count_if(separate.begin(), separate.end(), [](float v) { return v < 0; });
    relu(separate.data(), static_cast<int64_t>(separate.size()), separate.data());
    const std::vector<float> fused = run(t, d, cw, /*relu=*/true);
    const auto nans = std::count_if(fused.begin(), fused.end(), [](float v) { return std::isnan(v); });
    std::printf("[winograd upsample fused relu] %s: %td of %zu outputs negative before it, %td NaN\n",
                precision_name(p), negatives, fused.size(), nans);
    EXPECT_GT(negatives, 1000) << precision_name(p);
    EXPECT_GT(nans, 0) << precision_name(p);
    EXPECT_EQ(0, std::memcmp(separate.data(), fused.data(), fused.size() * sizeof(float)))
        << precision_name(p);
  }
}

TEST(WinogradUpsample, BitIdenticalForAnyThreadCount) {
  const Case t{"batch 2, 13x11, 48->80", 2, 13, 11, 48, 80, true, true};
  const Data d(t);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const Conv2dWeights cw = d.pack(t, p, ConvAlgorithm::WinogradUpsample2x);
    expect_thread_invariant(std::string("winograd upsample ") + precision_name(p),
                            [&] { return run(t, d, cw); });
  }
}

// Where a model asks for large tiles (its memory allows larger weights), in every precision; never
// for what plain Winograd cannot compute, nor when Winograd is off.
TEST(WinogradUpsample, ChosenWhereLargeTilesAreAllowed) {
  for (Precision p : {Precision::F32, Precision::BF16}) {
    EXPECT_EQ(conv2d_upsample2x_algorithm(64, 64, p), ConvAlgorithm::Winograd);  // none unless asked
    const ScopedLargeWinogradTiles tiles(kEveryWinogradConv);
    EXPECT_EQ(conv2d_upsample2x_algorithm(64, 64, p), ConvAlgorithm::WinogradUpsample2x);
    EXPECT_EQ(conv2d_upsample2x_algorithm(512, 512, p), ConvAlgorithm::WinogradUpsample2x);
    EXPECT_EQ(conv2d_upsample2x_algorithm(1280, 1280, p), ConvAlgorithm::Direct);  // over the Winograd limit
    EXPECT_EQ(conv2d_upsample2x_algorithm(64, 3, p), ConvAlgorithm::Direct);
    {
      const ScopedLargeWinogradTiles small(256);
      EXPECT_EQ(conv2d_upsample2x_algorithm(256, 256, p), ConvAlgorithm::WinogradUpsample2x);
      EXPECT_EQ(conv2d_upsample2x_algorithm(512, 512, p), ConvAlgorithm::Winograd);
    }
    set_conv_winograd(false);
    EXPECT_EQ(conv2d_upsample2x_algorithm(64, 64, p), ConvAlgorithm::Direct);
    set_conv_winograd(true);
  }
  EXPECT_EQ(conv2d_packed_rows(64, 3, 3, ConvAlgorithm::WinogradUpsample2x), 16 * 64);
  EXPECT_EQ(conv2d_packed_columns(64, ConvAlgorithm::WinogradUpsample2x), 4 * 64);
  EXPECT_EQ(conv2d_packed_columns(64, ConvAlgorithm::Winograd), 64);
}

TEST(WinogradUpsample, RejectsWhatItCannotCompute) {
  auto w = random_vec(16 * 16 * 9, 2);
  const Conv2dWeights cw =
      pack_conv2d(w.data(), nullptr, 16, 16, 3, 3, Precision::F32, ConvAlgorithm::WinogradUpsample2x);
  std::vector<float> x(4 * 4 * 16), y(8 * 8 * 16);
  // conv2d_nhwc is not the upsampling convolution.
  EXPECT_THROW(conv2d_nhwc(x.data(), 1, 4, 4, cw, Conv2dGeometry::same(3), y.data()), Error);
  EXPECT_THROW(conv2d_upsample2x_nhwc(x.data(), 1, 0, 4, cw, y.data()), Error);
  auto w1 = random_vec(16 * 16, 3);
  const Conv2dWeights pointwise = pack_conv2d(w1.data(), nullptr, 16, 16, 1, 1);
  EXPECT_THROW(conv2d_upsample2x_nhwc(x.data(), 1, 4, 4, pointwise, y.data()), Error);
  auto w3 = random_vec(16 * 3 * 9, 4);
  EXPECT_THROW(
      pack_conv2d(w3.data(), nullptr, 16, 3, 3, 3, Precision::F32, ConvAlgorithm::WinogradUpsample2x), Error);
}

}  // namespace
}  // namespace octodiff::kernels::test
