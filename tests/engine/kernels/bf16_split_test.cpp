// Split bf16 activations (gemm.h, ScopedBf16Activations): with bf16 weights every activation
// enters its products as hi + lo, so only the weight's rounding is left. The weights here are
// multiples of 1/8 in [−1, 1] — exact in bf16, and so are their Winograd transforms — so the
// reference is the plain double-precision result: Split must match it to ~1e-5 where Rounded
// misses by ~1e-3, on every bf16 path (bit-identical between them) and for any thread count;
// biases and residuals are added once, not once per half; attention runs in float32.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"

namespace octodiff::kernels::test {
namespace {

constexpr double kSplitTolerance = 2e-5;
constexpr double kMinGain = 20;  // Rounded's error over Split's, at least

std::vector<float> eighths(int64_t n, uint32_t seed) {
  std::vector<float> w = random_vec(n, seed);
  for (float& x : w) x = std::round(x * 8.0f) / 8.0f;
  return w;
}

TEST(Bf16Split, DefaultIsRoundedAndScopesNest) {
  EXPECT_EQ(bf16_activations(), Bf16Activations::Rounded);
  {
    ScopedBf16Activations split(Bf16Activations::Split);
    EXPECT_EQ(bf16_activations(), Bf16Activations::Split);
    {
      ScopedBf16Activations rounded(Bf16Activations::Rounded);
      EXPECT_EQ(bf16_activations(), Bf16Activations::Rounded);
    }
    EXPECT_EQ(bf16_activations(), Bf16Activations::Split);
  }
  EXPECT_EQ(bf16_activations(), Bf16Activations::Rounded);
}

TEST(Bf16Split, GemmKeepsActivationsTo16Bits) {
  struct Case {
    int64_t M, N, K, lda;
  };
  // Odd K, K over one chunk (1537), a row stride the driver reads in place (K + 5) and one it
  // copies (1024).
  for (const Case t : {Case{3, 5, 37, 37}, Case{77, 96, 1537, 1542}, Case{100, 130, 300, 1024}, Case{29, 64, 1001, 1001}}) {
    auto a = random_vec(t.M * t.lda, 41);
    auto b = eighths(t.K * t.N, 42);
    auto bias = random_vec(t.N, 43), res = random_vec(t.M * t.N, 44);
    const auto ref = reference_gemm(a, t.lda, b, t.M, t.N, t.K, bias.data(), res.data(), t.N);
    const PackedMatrix p = pack_b(b.data(), t.K, t.N, /*transposed=*/false, Precision::BF16);
    Epilogue ep;
    ep.bias = bias.data();
    ep.residual = res.data();
    ep.ldr = t.N;
    std::vector<float> first;
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      std::vector<float> rounded(t.M * t.N), split(t.M * t.N);
      gemm(a.data(), t.M, t.lda, p, rounded.data(), t.N, ep);
      {
        ScopedBf16Activations s(Bf16Activations::Split);
        gemm(a.data(), t.M, t.lda, p, split.data(), t.N, ep);
      }
      const double e_split = rel_error(split.data(), ref), e_rounded = rel_error(rounded.data(), ref);
      std::printf("[bf16 split gemm %s] M=%" PRId64 " N=%" PRId64 " K=%" PRId64
                  ": rel err split %.3g, rounded %.3g\n",
                  path.name().c_str(), t.M, t.N, t.K, e_split, e_rounded);
      EXPECT_LT(e_split, kSplitTolerance) << path.name() << " K=" << t.K;
      EXPECT_GT(e_rounded, kMinGain * e_split) << path.name() << " K=" << t.K;
      if (first.empty()) first = split;
      EXPECT_EQ(0, std::memcmp(first.data(), split.data(), split.size() * sizeof(float)))
          << path.name() << " differs from " << bf16_paths()[0].name() << " K=" << t.K;
    }
  }
}

TEST(Bf16Split, GemmAccumulatesOnceAndIsThreadInvariant) {
  const int64_t M = 301, N = 203, K = 1777;
  auto a = random_vec(M * K, 45), b = eighths(K * N, 46), c0 = random_vec(M * N, 47);
  const PackedMatrix p = pack_b(b.data(), K, N, false, Precision::BF16);
  const auto ref = reference_gemm(a, K, b, M, N, K, nullptr, c0.data(), N);
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    ScopedBf16Activations s(Bf16Activations::Split);
    Epilogue acc;
    acc.accumulate = true;
    std::vector<float> c = c0;
    gemm(a.data(), M, K, p, c.data(), N, acc);  // C += A·B
    EXPECT_LT(rel_error(c.data(), ref), kSplitTolerance) << path.name();
    expect_thread_invariant("split bf16 gemm " + path.name(), [&] {
      std::vector<float> out(M * N);
      gemm(a.data(), M, K, p, out.data(), N);
      return out;
    });
  }
}

struct ConvCase {
  const char* name;
  int64_t N, H, W, Ci, Co;
  int k;
  Conv2dGeometry g;
  ConvAlgorithm algorithm;
};

TEST(Bf16Split, ConvolutionsKeepActivationsTo16Bits) {
  const ConvCase cases[] = {
      {"3x3 same, 37→37, batch 2", 2, 6, 5, 37, 37, 3, Conv2dGeometry::same(3), ConvAlgorithm::Direct},
      {"3x3 stride 2, pad bottom/right", 1, 8, 10, 37, 37, 3, {2, 0, 0, 1, 1}, ConvAlgorithm::Direct},
      {"1x1, 64→40", 2, 5, 3, 64, 40, 1, {}, ConvAlgorithm::Direct},
      {"3x3 320→33 (K chunks)", 1, 5, 4, 320, 33, 3, Conv2dGeometry::same(3), ConvAlgorithm::Direct},
      {"Winograd 3x3 same, 32→48, odd size", 2, 7, 5, 32, 48, 3, Conv2dGeometry::same(3), ConvAlgorithm::Winograd},
  };
  for (const ConvCase& t : cases) {
    auto x = random_vec(t.N * t.H * t.W * t.Ci, 51), w = eighths(t.Co * t.Ci * t.k * t.k, 52);
    auto bias = random_vec(t.Co, 53);
    const Conv2dWeights cw =
        pack_conv2d(w.data(), bias.data(), t.Co, t.Ci, t.k, t.k, Precision::BF16, t.algorithm);
    ASSERT_EQ(cw.algorithm, t.algorithm) << t.name;
    const int64_t Ho = conv2d_out_size(t.H, t.k, t.g.stride, t.g.pad_top, t.g.pad_bottom);
    const int64_t Wo = conv2d_out_size(t.W, t.k, t.g.stride, t.g.pad_left, t.g.pad_right);
    const auto ref = reference_conv2d(x, w, t.N, t.H, t.W, t.Ci, t.Co, t.k, t.g, bias.data());
    std::vector<float> first;
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      std::vector<float> rounded(t.N * Ho * Wo * t.Co), split(rounded.size());
      conv2d_nhwc(x.data(), t.N, t.H, t.W, cw, t.g, rounded.data());
      {
        ScopedBf16Activations s(Bf16Activations::Split);
        conv2d_nhwc(x.data(), t.N, t.H, t.W, cw, t.g, split.data());
      }
      const double e_split = rel_error(split.data(), ref), e_rounded = rel_error(rounded.data(), ref);
      std::printf("[bf16 split conv %s] %s: rel err split %.3g, rounded %.3g\n", path.name().c_str(), t.name,
                  e_split, e_rounded);
      EXPECT_LT(e_split, kSplitTolerance) << path.name() << " " << t.name;
      EXPECT_GT(e_rounded, kMinGain * e_split) << path.name() << " " << t.name;
      if (first.empty()) first = split;
      EXPECT_EQ(0, std::memcmp(first.data(), split.data(), split.size() * sizeof(float)))
          << path.name() << " " << t.name;
    }
    ScopedBf16Activations s(Bf16Activations::Split);
    expect_thread_invariant(std::string("split bf16 conv ") + t.name, [&] {
      std::vector<float> y(t.N * Ho * Wo * t.Co);
      conv2d_nhwc(x.data(), t.N, t.H, t.W, cw, t.g, y.data());
      return y;
    });
  }
}

TEST(Bf16Split, AttentionRunsInFloat32) {
  const int64_t B = 2, Lq = 70, Lk = 77, H = 2, d = 40, C = H * d;
  auto q = random_vec(B * Lq * C, 61, -2.0f, 2.0f), k = random_vec(B * Lk * C, 62, -2.0f, 2.0f);
  auto v = random_vec(B * Lk * C, 63);
  AttentionShape s;
  s.batch = B;
  s.q_len = Lq;
  s.kv_len = Lk;
  s.heads = H;
  s.head_dim = d;
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    std::vector<float> f32(B * Lq * C), split(f32.size()), rounded(f32.size());
    attention(q.data(), k.data(), v.data(), f32.data(), s, 0.2f, false, Precision::F32);
    attention(q.data(), k.data(), v.data(), rounded.data(), s, 0.2f, false, Precision::BF16);
    {
      ScopedBf16Activations sp(Bf16Activations::Split);
      attention(q.data(), k.data(), v.data(), split.data(), s, 0.2f, false, Precision::BF16);
    }
    EXPECT_EQ(0, std::memcmp(f32.data(), split.data(), f32.size() * sizeof(float))) << path.name();
    EXPECT_NE(0, std::memcmp(f32.data(), rounded.data(), f32.size() * sizeof(float))) << path.name();
  }
}

}  // namespace
}  // namespace octodiff::kernels::test
