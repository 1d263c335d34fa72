#include "kernels/conv2d.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernel_test_util.h"

namespace octodiff::kernels::test {
namespace {

struct ConvCase {
  const char* name;
  int64_t N, H, W, Ci, Co;
  int k;
  Conv2dGeometry g;
  bool bias, residual;
};

const ConvCase kCases[] = {
    {"3x3 same, Ci=3 Co=5", 1, 7, 9, 3, 5, 3, Conv2dGeometry::same(3), true, false},
    {"3x3 same, 37→37, batch 2, residual", 2, 6, 5, 37, 37, 3, Conv2dGeometry::same(3), true, true},
    {"VAE downsample: stride 2, pad bottom/right", 1, 8, 10, 37, 37, 3, {2, 0, 0, 1, 1}, true, false},
    {"stride 2, odd input, pad bottom/right", 2, 9, 7, 5, 3, 3, {2, 0, 0, 1, 1}, false, false},
    {"3x3 asymmetric pads", 1, 6, 7, 5, 37, 3, {1, 1, 2, 0, 1}, true, false},
    {"3x3 stride 2 pad 1", 1, 9, 9, 16, 33, 3, {2, 1, 1, 1, 1}, true, false},
    {"1x1, 37→64, bias + residual", 2, 5, 3, 37, 64, 1, {}, true, true},
    {"1x1 stride 2", 1, 7, 6, 8, 5, 1, {2, 0, 0, 0, 0}, false, false},
    {"3x3 on a 1x1 image", 1, 1, 1, 4, 6, 3, Conv2dGeometry::same(3), true, false},
    {"3x3 wide channels 320→33", 1, 5, 4, 320, 33, 3, Conv2dGeometry::same(3), true, true},
    {"conv_out 128→3", 1, 6, 6, 128, 3, 3, Conv2dGeometry::same(3), true, false},
};

TEST(Conv2d, OutputSize) {
  EXPECT_EQ(conv2d_out_size(64, 3, 1, 1, 1), 64);
  EXPECT_EQ(conv2d_out_size(64, 3, 2, 0, 1), 32);  // VAE downsample
  EXPECT_EQ(conv2d_out_size(7, 3, 2, 0, 1), 3);
  EXPECT_EQ(conv2d_out_size(5, 1, 1, 0, 0), 5);
}

TEST(Conv2d, MatchesDoubleReferenceOnEveryIsa) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const ConvCase& t : kCases) {
      const int64_t Ho = conv2d_out_size(t.H, t.k, t.g.stride, t.g.pad_top, t.g.pad_bottom);
      const int64_t Wo = conv2d_out_size(t.W, t.k, t.g.stride, t.g.pad_left, t.g.pad_right);
      auto x = random_vec(t.N * t.H * t.W * t.Ci, 21);
      auto w = random_vec(t.Co * t.Ci * t.k * t.k, 22);
      auto bias = random_vec(t.Co, 23);
      auto res = random_vec(t.N * Ho * Wo * t.Co, 24);
      const Conv2dWeights cw = pack_conv2d(w.data(), t.bias ? bias.data() : nullptr, t.Co, t.Ci, t.k, t.k);
      std::vector<float> y(res.size(), NAN);
      conv2d_nhwc(x.data(), t.N, t.H, t.W, cw, t.g, y.data(), t.residual ? res.data() : nullptr);
      const auto ref = reference_conv2d(x, w, t.N, t.H, t.W, t.Ci, t.Co, t.k, t.g,
                                        t.bias ? bias.data() : nullptr, t.residual ? res.data() : nullptr);
      const double err = rel_error(y.data(), ref);
      EXPECT_LT(err, 1e-5) << isa_name(isa) << " " << t.name;
      std::printf("[conv %s] %-45s rel err %.3g\n", isa_name(isa).c_str(), t.name, err);
    }
  }
}

TEST(Conv2d, BitIdenticalForAnyThreadCount) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    const int64_t N = 2, H = 13, W = 11, Ci = 40, Co = 70;
    auto x = random_vec(N * H * W * Ci, 25);
    auto w = random_vec(Co * Ci * 9, 26);
    auto bias = random_vec(Co, 27);
    const Conv2dWeights cw = pack_conv2d(w.data(), bias.data(), Co, Ci, 3, 3);
    expect_thread_invariant("conv3x3 " + isa_name(isa), [&] {
      std::vector<float> y(N * H * W * Co);
      conv2d_nhwc(x.data(), N, H, W, cw, Conv2dGeometry::same(3), y.data());
      return y;
    });
  }
}

// The direct convolution's weight, read tap-major as it is packed (row by row through a scratch,
// or on AVX-512 in 16×16 blocks for channels in multiples of 16), is byte for byte the
// element-by-element packing of the reordered matrix B[(ty·kw + tx)·Ci + ci][co], in both
// precisions and on every ISA: several panels with a partial last one, channels in and not in
// multiples of 16, 1×1, non-square and more than 16 taps, and NaN, infinities, subnormals and
// rounding ties among the values.
TEST(Conv2d, PackedWeightIsTheReorderedMatrixPacked) {
  struct Shape {
    int64_t co, ci;
    int kh, kw;
  };
  const Shape shapes[] = {{33, 5, 3, 3},  {80, 130, 3, 3}, {17, 70, 1, 1}, {20, 3, 2, 5},
                          {64, 48, 3, 3}, {40, 32, 3, 3},  {36, 16, 2, 2}, {33, 32, 5, 5}};
  const uint32_t specials[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u,
                               0x807fffffu, 0x3f808000u, 0x3f818000u, 0x7f800001u};
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const Shape& t : shapes) {
      const int64_t taps = int64_t{t.kh} * t.kw, K = t.ci * taps;
      auto w = random_vec(t.co * K, 21, -3.0f, 3.0f);
      for (size_t i = 0; i < w.size(); i += 7) w[i] = bits_to_f32(specials[(i / 7) % 8]);
      std::vector<float> b(w.size());  // K × Co, tap-major rows
      for (int64_t co = 0; co < t.co; ++co)
        for (int64_t tap = 0; tap < taps; ++tap)
          for (int64_t ci = 0; ci < t.ci; ++ci)
            b[(tap * t.ci + ci) * t.co + co] = w[(co * t.ci + ci) * taps + tap];
      for (Precision precision : {Precision::F32, Precision::BF16}) {
        const Conv2dWeights cw =
            pack_conv2d(w.data(), nullptr, t.co, t.ci, t.kh, t.kw, precision, ConvAlgorithm::Direct);
        const PackedMatrix want = pack_b(b.data(), K, t.co, /*transposed=*/false, precision);
        ASSERT_EQ(cw.packed.bytes(), want.bytes());
        const void* g =
            precision == Precision::BF16 ? static_cast<const void*>(cw.packed.bf16_data()) : cw.packed.data();
        const void* e =
            precision == Precision::BF16 ? static_cast<const void*>(want.bf16_data()) : want.data();
        EXPECT_EQ(std::memcmp(g, e, want.bytes()), 0)
            << isa_name(isa) << " " << precision_name(precision) << " " << t.co << "x" << t.ci << "x" << t.kh
            << "x" << t.kw;
      }
    }
  }
}

TEST(Conv2d, RejectsKernelLargerThanInput) {
  auto w = random_vec(2 * 2 * 9, 1);
  const Conv2dWeights cw = pack_conv2d(w.data(), nullptr, 2, 2, 3, 3);
  std::vector<float> x(2 * 2 * 2), y(8);
  EXPECT_THROW(conv2d_nhwc(x.data(), 1, 2, 2, cw, Conv2dGeometry{}, y.data()), Error);
}

}  // namespace
}  // namespace octodiff::kernels::test
