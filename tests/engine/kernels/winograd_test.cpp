// Winograd F(2×2, 3×3) and F(4×4, 3×3) convolutions against a double-precision direct
// convolution: odd image sizes (partial tiles), batches, bias + residual, several blocks of tiles,
// K chunks, narrow outputs; f32 on every ISA, bf16 (F(2×2) only) on every bf16 path (bit-identical
// between them); a fused ReLU equal to the separate pass; thread-count invariance; which
// convolutions the model loader sends to them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/activations.h"
#include "kernels/conv2d.h"

namespace octodiff::kernels::test {
namespace {

struct Case {
  const char* name;
  int64_t N, H, W, Ci, Co;
  bool bias, residual;
};

const Case kCases[] = {
    {"7x9, 16->16", 1, 7, 9, 16, 16, true, false},
    {"batch 2, 6x5, 32->48, bias + residual", 2, 6, 5, 32, 48, true, true},
    {"1x1 image", 1, 1, 1, 16, 32, true, false},
    {"2x3 image, no bias", 1, 2, 3, 16, 16, false, false},
    {"batch 2, 24x23 (several blocks), 48->80", 2, 24, 23, 48, 80, true, true},
    {"400->64 (two K chunks)", 1, 5, 4, 400, 64, true, false},
};

struct Data {
  std::vector<float> x, w, bias, res;
  explicit Data(const Case& t)
      : x(random_vec(t.N * t.H * t.W * t.Ci, 31)),
        w(random_vec(t.Co * t.Ci * 9, 32, -0.3f, 0.3f)),
        bias(random_vec(t.Co, 33)),
        res(random_vec(t.N * t.H * t.W * t.Co, 34)) {}
};

std::vector<float> run(const Case& t, const Data& d, const Conv2dWeights& cw) {
  std::vector<float> y(static_cast<size_t>(t.N * t.H * t.W * t.Co), NAN);
  conv2d_nhwc(d.x.data(), t.N, t.H, t.W, cw, Conv2dGeometry::same(3), y.data(), t.residual ? d.res.data() : nullptr);
  return y;
}

TEST(Winograd, MatchesDoubleReferenceOnEveryIsa) {
  for (ConvAlgorithm algorithm : {ConvAlgorithm::Winograd, ConvAlgorithm::Winograd4x4}) {
    const bool large = algorithm == ConvAlgorithm::Winograd4x4;
    for (Isa isa : available_isas()) {
      ScopedKernelIsa scoped(isa);
      for (const Case& t : kCases) {
        const Data d(t);
        const Conv2dWeights cw = pack_conv2d(d.w.data(), t.bias ? d.bias.data() : nullptr, t.Co, t.Ci, 3, 3,
                                             Precision::F32, algorithm);
        ASSERT_EQ(cw.packed.K(), (large ? 36 : 16) * t.Ci);
        const auto y = run(t, d, cw);
        const auto ref =
            reference_conv2d(d.x, d.w, t.N, t.H, t.W, t.Ci, t.Co, 3, Conv2dGeometry::same(3),
                             t.bias ? d.bias.data() : nullptr, t.residual ? d.res.data() : nullptr);
        const double err = rel_error(y.data(), ref);
        // F(4×4)'s transforms have coefficients up to 8 (F(2×2)'s: 1): ~15× the rounding error,
        // 1.1e-5 at most here (400 input channels), F(2×2) 7e-7.
        EXPECT_LT(err, large ? 2e-5 : 1e-5) << isa_name(isa) << " " << t.name << (large ? " F(4x4)" : " F(2x2)");
        std::printf("[winograd %s %s] %-42s rel err %.3g\n", large ? "F(4x4)" : "F(2x2)", isa_name(isa).c_str(),
                    t.name, err);
      }
    }
  }
}

TEST(Winograd, Bf16MatchesReferenceOnEveryPathBitIdentically) {
  const std::vector<Path> paths = bf16_paths();
  for (const Case& t : kCases) {
    const Data d(t);
    const Conv2dWeights wino = pack_conv2d(d.w.data(), t.bias ? d.bias.data() : nullptr, t.Co, t.Ci, 3, 3,
                                           Precision::BF16, ConvAlgorithm::Winograd);
    const Conv2dWeights direct = pack_conv2d(d.w.data(), t.bias ? d.bias.data() : nullptr, t.Co, t.Ci, 3, 3,
                                             Precision::BF16, ConvAlgorithm::Direct);
    const auto ref = reference_conv2d(d.x, d.w, t.N, t.H, t.W, t.Ci, t.Co, 3, Conv2dGeometry::same(3),
                                      t.bias ? d.bias.data() : nullptr, t.residual ? d.res.data() : nullptr);
    std::vector<float> first;
    for (const Path& path : paths) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      const auto y = run(t, d, wino);
      const double err = rel_error(y.data(), ref);
      const double direct_err = rel_error(run(t, d, direct).data(), ref);
      // bf16 rounds the transformed input and weight instead of the input and weight: the same
      // order of error as the direct bf16 convolution.
      EXPECT_LT(err, 2e-2) << path.name() << " " << t.name;
      EXPECT_LT(err, 4 * direct_err + 1e-6) << path.name() << " " << t.name;
      std::printf("[winograd bf16 %s] %-42s rel err %.3g (direct bf16 %.3g)\n", path.name().c_str(), t.name, err,
                  direct_err);
      if (first.empty()) first = y;
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float))) << path.name() << " " << t.name;
    }
  }
}

// relu = true is the convolution followed by kernels::relu, to the bit, for every algorithm and
// precision (fused into Winograd's output transform, a pass over y for direct convolutions), with
// bias and residual before it; a NaN stays NaN.
TEST(Winograd, FusedReluIsTheSeparatePassToTheBit) {
  const Case t{"batch 2, 13x11, 48->80, bias + residual", 2, 13, 11, 48, 80, true, true};
  Data d(t);
  d.x[5 * t.Ci + 3] = NAN;  // reaches the outputs whose windows hold it
  const std::pair<Precision, ConvAlgorithm> variants[] = {{Precision::F32, ConvAlgorithm::Direct},
                                                          {Precision::F32, ConvAlgorithm::Winograd},
                                                          {Precision::F32, ConvAlgorithm::Winograd4x4},
                                                          {Precision::BF16, ConvAlgorithm::Direct},
                                                          {Precision::BF16, ConvAlgorithm::Winograd}};
  for (const auto& [precision, algorithm] : variants) {
    const Conv2dWeights cw = pack_conv2d(d.w.data(), d.bias.data(), t.Co, t.Ci, 3, 3, precision, algorithm);
    std::vector<float> separate = run(t, d, cw);
    const auto negatives = std::count_if(separate.begin(), separate.end(), [](float v) { return v < 0; });
    relu(separate.data(), static_cast<int64_t>(separate.size()), separate.data());
    std::vector<float> fused(separate.size(), 7.0f);
    conv2d_nhwc(d.x.data(), t.N, t.H, t.W, cw, Conv2dGeometry::same(3), fused.data(), d.res.data(), /*relu=*/true);
    const auto nans = std::count_if(fused.begin(), fused.end(), [](float v) { return std::isnan(v); });
    const std::string label = std::string(precision_name(precision)) + " algorithm " +
                              std::to_string(static_cast<int>(algorithm));
    std::printf("[fused relu] %s: %td of %zu outputs negative before it, %td NaN\n", label.c_str(), negatives,
                fused.size(), nans);
    EXPECT_GT(negatives, 1000) << label;
    EXPECT_GT(nans, 0) << label;
    EXPECT_EQ(0, std::memcmp(separate.data(), fused.data(), fused.size() * sizeof(float))) << label;
  }
}

TEST(Winograd, BitIdenticalForAnyThreadCount) {
  const Case t{"batch 2, 13x11, 48->80", 2, 13, 11, 48, 80, true, true};
  const Data d(t);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const Conv2dWeights cw = pack_conv2d(d.w.data(), d.bias.data(), t.Co, t.Ci, 3, 3, p, ConvAlgorithm::Winograd);
    expect_thread_invariant(std::string("winograd ") + precision_name(p), [&] { return run(t, d, cw); });
  }
  const Conv2dWeights large =
      pack_conv2d(d.w.data(), d.bias.data(), t.Co, t.Ci, 3, 3, Precision::F32, ConvAlgorithm::Winograd4x4);
  expect_thread_invariant("winograd F(4x4) f32", [&] { return run(t, d, large); });
}

TEST(Winograd, ChosenForTheVaeAndTheUNetsUpperLevelsOnly) {
  const auto algo = [&](int64_t co, int64_t ci, int k = 3, Conv2dGeometry g = Conv2dGeometry::same(3)) {
    return conv2d_algorithm(co, ci, k, k, g, Precision::BF16);
  };
  EXPECT_EQ(algo(320, 320), ConvAlgorithm::Winograd);   // UNet 64x64 level
  EXPECT_EQ(algo(640, 1920), ConvAlgorithm::Winograd);  // UNet 32x32 level, up block
  EXPECT_EQ(algo(128, 128), ConvAlgorithm::Winograd);   // VAE 512x512 level
  EXPECT_EQ(algo(512, 4), ConvAlgorithm::Direct);       // VAE conv_in
  EXPECT_EQ(algo(1280, 1280), ConvAlgorithm::Direct);   // UNet 16x16 and 8x8 levels: weight memory
  EXPECT_EQ(algo(320, 4), ConvAlgorithm::Direct);       // UNet conv_in
  EXPECT_EQ(algo(4, 320), ConvAlgorithm::Direct);       // UNet conv_out
  EXPECT_EQ(algo(320, 320, 3, Conv2dGeometry{2, 1, 1, 1, 1}), ConvAlgorithm::Direct);  // downsampler
  EXPECT_EQ(algo(320, 640, 1, Conv2dGeometry{}), ConvAlgorithm::Direct);               // shortcut
  {
    const ScopedWinogradLimit limit(320);
    EXPECT_EQ(algo(320, 640), ConvAlgorithm::Winograd);
    EXPECT_EQ(algo(640, 640), ConvAlgorithm::Direct);
  }
  {
    const ScopedWinogradLimit limit(640, 640);  // the bf16 UNet's: the 32x32 level only
    EXPECT_EQ(algo(640, 1920), ConvAlgorithm::Winograd);
    EXPECT_EQ(algo(320, 320), ConvAlgorithm::Direct);
    EXPECT_EQ(algo(1280, 1280), ConvAlgorithm::Direct);
    {
      const ScopedWinogradLimit inner(320);  // nested limits narrow the range: here to nothing
      EXPECT_EQ(algo(640, 640), ConvAlgorithm::Direct);
      EXPECT_EQ(algo(320, 320), ConvAlgorithm::Direct);
    }
    EXPECT_EQ(algo(640, 640), ConvAlgorithm::Winograd);
  }
  EXPECT_EQ(algo(320, 320), ConvAlgorithm::Winograd);
  EXPECT_EQ(algo(640, 640), ConvAlgorithm::Winograd);
  set_conv_winograd(false);
  EXPECT_EQ(algo(320, 320), ConvAlgorithm::Direct);
  set_conv_winograd(true);
  EXPECT_EQ(conv2d_packed_rows(320, 3, 3, ConvAlgorithm::Winograd), 16 * 320);
  EXPECT_EQ(conv2d_packed_rows(320, 3, 3, ConvAlgorithm::Winograd4x4), 36 * 320);
  EXPECT_EQ(conv2d_packed_rows(320, 3, 3, ConvAlgorithm::Direct), 9 * 320);
}

TEST(Winograd, LargeTilesOnlyForFloat32WeightsAModelAsksThemFor) {
  const auto algo = [&](int64_t co, int64_t ci, Precision p, Conv2dGeometry g = Conv2dGeometry::same(3)) {
    return conv2d_algorithm(co, ci, 3, 3, g, p);
  };
  EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Winograd);  // none unless asked
  {
    const ScopedLargeWinogradTiles tiles(256);  // e.g. a VAE's 512x512 and 256x256 levels
    EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Winograd4x4);
    EXPECT_EQ(algo(256, 512, Precision::F32), ConvAlgorithm::Winograd4x4);
    EXPECT_EQ(algo(512, 512, Precision::F32), ConvAlgorithm::Winograd);    // over the limit
    EXPECT_EQ(algo(128, 128, Precision::BF16), ConvAlgorithm::Winograd);   // bf16: F(2x2) always
    EXPECT_EQ(algo(128, 3, Precision::F32), ConvAlgorithm::Direct);        // what Winograd cannot do
    EXPECT_EQ(algo(128, 128, Precision::F32, Conv2dGeometry{2, 1, 1, 1, 1}), ConvAlgorithm::Direct);
    {
      const ScopedWinogradLimit limit(64);  // a Winograd limit still applies
      EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Direct);
      EXPECT_EQ(algo(64, 64, Precision::F32), ConvAlgorithm::Winograd4x4);
    }
    {
      const ScopedLargeWinogradTiles none(0);  // the innermost applies
      EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Winograd);
    }
    EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Winograd4x4);
    set_conv_winograd(false);
    EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Direct);
    set_conv_winograd(true);
  }
  EXPECT_EQ(algo(128, 128, Precision::F32), ConvAlgorithm::Winograd);
}

TEST(Winograd, RejectsWhatItCannotCompute) {
  auto w = random_vec(16 * 3 * 9, 1);
  EXPECT_THROW(pack_conv2d(w.data(), nullptr, 16, 3, 3, 3, Precision::F32, ConvAlgorithm::Winograd), Error);
  auto w16 = random_vec(16 * 16 * 9, 2);
  const Conv2dWeights cw = pack_conv2d(w16.data(), nullptr, 16, 16, 3, 3, Precision::F32, ConvAlgorithm::Winograd);
  std::vector<float> x(4 * 4 * 16), y(4 * 4 * 16);
  EXPECT_THROW(conv2d_nhwc(x.data(), 1, 4, 4, cw, Conv2dGeometry{2, 1, 1, 1, 1}, y.data()), Error);
  // F(4x4): float32 only, and the same shapes as F(2x2).
  EXPECT_THROW(pack_conv2d(w16.data(), nullptr, 16, 16, 3, 3, Precision::BF16, ConvAlgorithm::Winograd4x4), Error);
  EXPECT_THROW(pack_conv2d(w.data(), nullptr, 16, 3, 3, 3, Precision::F32, ConvAlgorithm::Winograd4x4), Error);
  const Conv2dWeights large =
      pack_conv2d(w16.data(), nullptr, 16, 16, 3, 3, Precision::F32, ConvAlgorithm::Winograd4x4);
  EXPECT_THROW(conv2d_nhwc(x.data(), 1, 4, 4, large, Conv2dGeometry{2, 1, 1, 1, 1}, y.data()), Error);
}

}  // namespace
}  // namespace octodiff::kernels::test
