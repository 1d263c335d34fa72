// Convolutions into at most 8 output channels (conv2d_few_outputs.cpp: the autoencoders' last
// layers, the UNet's conv_out): against a double-precision convolution in both precisions (bf16:
// on the bf16-rounded input and weight, where only float32 summation differs), the same bits on
// every ISA path and thread count, the fused epilogue, and which weights take this kernel.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/gemm.h"
#include "kernels/internal.h"

namespace octodiff::kernels::test {
namespace {

struct FewCase {
  const char* name;
  int64_t N, H, W, Ci, Co;
  int k;
  Conv2dGeometry g;
  bool bias, residual, relu;
};

// Widths that leave pixels for the one-at-a-time edge path and whole groups of 4 (or 2) inside.
const FewCase kCases[] = {
    {"TAESD out 64->3", 1, 9, 23, 64, 3, 3, Conv2dGeometry::same(3), true, false, false},
    {"VAE conv_out 128->3, batch 2", 2, 6, 13, 128, 3, 3, Conv2dGeometry::same(3), true, false, false},
    {"UNet conv_out 320->4, residual, relu", 1, 5, 11, 320, 4, 3, Conv2dGeometry::same(3), true, true, true},
    {"16->1", 1, 4, 7, 16, 1, 3, Conv2dGeometry::same(3), false, false, false},
    {"32->5 stride 2, pad bottom/right", 2, 9, 15, 32, 5, 3, {2, 0, 0, 1, 1}, true, false, false},
    {"48->8 asymmetric pads, relu", 1, 7, 12, 48, 8, 3, {1, 1, 2, 0, 1}, true, true, true},
    {"16->7 5x5 stride 2", 1, 11, 14, 16, 7, 5, {2, 2, 2, 2, 2}, false, false, false},
    {"32->6 1x1", 1, 3, 10, 32, 6, 1, {}, true, false, false},
    {"64->2 on a 1x1 image", 1, 1, 1, 64, 2, 3, Conv2dGeometry::same(3), true, false, false},
};

struct Data {
  std::vector<float> x, w, bias, res;
  int64_t Ho, Wo;
};

Data make_data(const FewCase& t) {
  Data d;
  d.Ho = conv2d_out_size(t.H, t.k, t.g.stride, t.g.pad_top, t.g.pad_bottom);
  d.Wo = conv2d_out_size(t.W, t.k, t.g.stride, t.g.pad_left, t.g.pad_right);
  d.x = random_vec(t.N * t.H * t.W * t.Ci, 31);
  d.w = random_vec(t.Co * t.Ci * t.k * t.k, 32, -0.2f, 0.2f);
  d.bias = random_vec(t.Co, 33);
  d.res = random_vec(t.N * d.Ho * d.Wo * t.Co, 34);
  return d;
}

std::vector<float> run(const FewCase& t, const Data& d, Precision precision) {
  const Conv2dWeights cw =
      pack_conv2d(d.w.data(), t.bias ? d.bias.data() : nullptr, t.Co, t.Ci, t.k, t.k, precision);
  EXPECT_TRUE(detail::conv2d_few_outputs_applies(cw)) << t.name;
  std::vector<float> y(d.res.size(), NAN);
  conv2d_nhwc(d.x.data(), t.N, t.H, t.W, cw, t.g, y.data(), t.residual ? d.res.data() : nullptr, t.relu);
  return y;
}

std::vector<double> reference(const FewCase& t, const Data& d, const std::vector<float>& x,
                              const std::vector<float>& w) {
  auto ref = reference_conv2d(x, w, t.N, t.H, t.W, t.Ci, t.Co, t.k, t.g, t.bias ? d.bias.data() : nullptr,
                              t.residual ? d.res.data() : nullptr);
  if (t.relu)
    for (double& v : ref) v = v < 0 ? 0 : v;
  return ref;
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

TEST(Conv2dFewOutputs, Float32MatchesDoubleAndIsTheSameOnEveryIsa) {
  for (const FewCase& t : kCases) {
    const Data d = make_data(t);
    const auto ref = reference(t, d, d.x, d.w);
    std::vector<float> first;
    for (Isa isa : available_isas()) {
      ScopedKernelIsa scoped(isa);
      const std::vector<float> y = run(t, d, Precision::F32);
      const double err = rel_error(y.data(), ref);
      EXPECT_LT(err, 1e-6) << isa_name(isa) << " " << t.name;
      std::printf("[few outputs f32 %s] %-40s rel err %.3g\n", isa_name(isa).c_str(), t.name, err);
      if (first.empty()) first = y;
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
          << isa_name(isa) << " " << t.name;
    }
  }
}

// bf16: the products of the rounded input and weight, exact in float32 and summed in float32 —
// tight against the double convolution of the rounded values, and as far from the unrounded one
// as bf16 rounding makes it; the same bits on the generic, AVX2 and both AVX-512 paths.
TEST(Conv2dFewOutputs, Bf16IsTheRoundedConvolutionOnEveryPath) {
  for (const FewCase& t : kCases) {
    const Data d = make_data(t);
    const auto ref_rounded = reference(t, d, rounded(d.x), rounded(d.w));
    const auto ref_f32 = reference(t, d, d.x, d.w);
    std::vector<float> first;
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      const std::vector<float> y = run(t, d, Precision::BF16);
      const double tight = rel_error(y.data(), ref_rounded), loose = rel_error(y.data(), ref_f32);
      EXPECT_LT(tight, 1e-6) << path.name() << " " << t.name;
      EXPECT_LT(loose, 1e-2) << path.name() << " " << t.name;
      std::printf("[few outputs bf16 %s] %-40s vs rounded %.3g, vs f32 %.3g\n", path.name().c_str(), t.name,
                  tight, loose);
      if (first.empty()) first = y;
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
          << path.name() << " " << t.name;
    }
  }
}

TEST(Conv2dFewOutputs, BitIdenticalForAnyThreadCount) {
  const FewCase& t = kCases[1];
  const Data d = make_data(t);
  for (Precision precision : {Precision::F32, Precision::BF16})
    for (Isa isa : available_isas()) {
      ScopedKernelIsa scoped(isa);
      expect_thread_invariant(std::string(precision_name(precision)) + " " + isa_name(isa),
                              [&] { return run(t, d, precision); });
    }
}

// A NaN in one input pixel reaches exactly the outputs whose taps read it, through the fused ReLU
// (kernels::relu's a < 0 ? 0 : a keeps NaN); taps in the padding are skipped, not multiplied.
TEST(Conv2dFewOutputs, NanReachesOnlyTheOutputsThatReadIt) {
  const int64_t H = 5, W = 9, Ci = 16, Co = 3;
  auto x = random_vec(H * W * Ci, 41);
  auto w = random_vec(Co * Ci * 9, 42);
  x[(2 * W + 6) * Ci + 5] = NAN;  // row 2, column 6
  const Conv2dWeights cw = pack_conv2d(w.data(), nullptr, Co, Ci, 3, 3);
  std::vector<float> y(H * W * Co);
  conv2d_nhwc(x.data(), 1, H, W, cw, Conv2dGeometry::same(3), y.data(), nullptr, /*relu=*/true);
  for (int64_t oy = 0; oy < H; ++oy)
    for (int64_t ox = 0; ox < W; ++ox)
      for (int64_t co = 0; co < Co; ++co) {
        const bool reads = std::abs(oy - 2) <= 1 && std::abs(ox - 6) <= 1;
        EXPECT_EQ(std::isnan(y[(oy * W + ox) * Co + co]), reads) << oy << "," << ox << "," << co;
      }
}

// Where the kernel applies: a Direct weight with ≤ 8 outputs and input channels in multiples of
// 16, not under Split bf16 activations (those keep the GEMM's two passes); otherwise conv2d_nhwc
// takes the implicit GEMM, which still matches the reference.
TEST(Conv2dFewOutputs, AppliesOnlyWhereItFits) {
  auto w = random_vec(64 * 64 * 9, 51);
  const auto packed = [&](int64_t co, int64_t ci, Precision p, ConvAlgorithm a = ConvAlgorithm::Direct) {
    return pack_conv2d(w.data(), nullptr, co, ci, 3, 3, p, a);
  };
  EXPECT_TRUE(detail::conv2d_few_outputs_applies(packed(8, 16, Precision::F32)));
  EXPECT_TRUE(detail::conv2d_few_outputs_applies(packed(1, 64, Precision::BF16)));
  EXPECT_FALSE(detail::conv2d_few_outputs_applies(packed(9, 16, Precision::F32)));
  EXPECT_FALSE(detail::conv2d_few_outputs_applies(packed(3, 24, Precision::F32)));
  EXPECT_FALSE(detail::conv2d_few_outputs_applies(packed(16, 16, Precision::F32, ConvAlgorithm::Winograd)));
  {
    const ScopedBf16Activations split(Bf16Activations::Split);
    EXPECT_FALSE(detail::conv2d_few_outputs_applies(packed(3, 64, Precision::BF16)));
    EXPECT_TRUE(detail::conv2d_few_outputs_applies(packed(3, 64, Precision::F32)));
  }
  // The GEMM's cases beside it: 9 outputs, and 3 outputs from 24 channels.
  for (const auto& [co, ci] : {std::pair<int64_t, int64_t>{9, 16}, {3, 24}}) {
    const int64_t H = 4, W = 6;
    auto x = random_vec(H * W * ci, 52);
    const Conv2dWeights cw = packed(co, ci, Precision::F32);
    std::vector<float> y(H * W * co);
    conv2d_nhwc(x.data(), 1, H, W, cw, Conv2dGeometry::same(3), y.data());
    const std::vector<float> w_used(w.begin(), w.begin() + co * ci * 9);
    const double err =
        rel_error(y.data(), reference_conv2d(x, w_used, 1, H, W, ci, co, 3, Conv2dGeometry::same(3)));
    EXPECT_LT(err, 1e-5) << co << "x" << ci;
  }
}

}  // namespace
}  // namespace octodiff::kernels::test
