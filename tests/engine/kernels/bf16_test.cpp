// The bf16 kernels (Precision::BF16): GEMM, conv2d and attention against double references
// computed on bf16-rounded inputs (tight: only float32 summation differs) and on the original
// float32 inputs (loose: what bf16 rounding costs), on every path this CPU runs — generic, AVX2,
// AVX-512 widening and AVX-512 BF16 (VDPBF16PS) — which must agree bit for bit for GEMM and
// conv, and for any thread count.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"
#include "kernels/internal.h"
#include "kernels/isa.h"
#include "kernels/tuning.h"

namespace octodiff::kernels::test {
namespace {

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

TEST(Bf16, ConversionMatchesHalfH) {
  std::vector<float> x = {
      0.0f,       -0.0f,  1.0f,    -1.0f,   INFINITY, -INFINITY, NAN,
      -NAN,       1e-40f, -1e-45f, 3.4e38f, -3.4e38f, 65504.0f,  1.00390625f /* tie, even */,
      1.01171875f /* tie, odd */};
  std::mt19937 gen(5);
  for (int i = 0; i < 100000; ++i) x.push_back(bits_to_f32(static_cast<uint32_t>(gen())));
  for (uint32_t b : {0x7f800001u, 0xffc00000u, 0x7fffffffu, 0x3f808000u, 0x3f818000u, 0x0000ffffu})
    x.push_back(bits_to_f32(b));
  for (const Path& path : bf16_paths()) {
    // Odd lengths and offsets reach the vector loops and their tails.
    for (size_t off : {size_t{0}, size_t{3}}) {
      std::vector<uint16_t> y(x.size() - off);
      detail::to_bf16_fn(path.isa, path.dot)(x.data() + off, static_cast<int64_t>(y.size()), y.data());
      size_t bad = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const float v = x[i + off];
        // VCVTNEPS2BF16 flushes subnormal inputs to zero (which VDPBF16PS reads them as anyway).
        const bool flushed = path.dot && std::fpclassify(v) == FP_SUBNORMAL;
        const uint16_t want = flushed ? uint16_t(std::signbit(v) ? 0x8000 : 0) : f32_to_bf16(v);
        bad += y[i] != want;
      }
      EXPECT_EQ(bad, 0u) << path.name() << " offset " << off;
    }
  }
}

struct GemmCase {
  int64_t M, N, K;
};

// A weight packed from torch's layout (N × K, transposed=true: the path every model weight
// takes, blocked and vectorised) is byte for byte the weight packed element by element from
// K × N, in both precisions and on every ISA: odd K, K across several blocks, partial panels,
// and NaN, infinities, subnormals and rounding ties among the values.
TEST(PackB, TransposedPackingMatchesElementwisePacking) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 37}, {129, 33}, {256, 64}, {257, 95}, {1001, 31}};
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (auto [K, N] : shapes) {
      auto b = random_vec(K * N, 11, -3.0f, 3.0f);  // K × N
      const uint32_t specials[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u, 0x807fffffu,
                                   0x3f808000u, 0x3f818000u, 0x7f800001u};
      for (size_t i = 0; i < b.size(); i += 7) b[i] = bits_to_f32(specials[(i / 7) % 8]);
      std::vector<float> bt(b.size());  // N × K
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) bt[n * K + k] = b[k * N + n];
      for (Precision precision : {Precision::F32, Precision::BF16}) {
        const PackedMatrix want = pack_b(b.data(), K, N, /*transposed=*/false, precision);
        const PackedMatrix got = pack_b(bt.data(), K, N, /*transposed=*/true, precision);
        ASSERT_EQ(got.bytes(), want.bytes());
        const void* g = precision == Precision::BF16 ? static_cast<const void*>(got.bf16_data()) : got.data();
        const void* w = precision == Precision::BF16 ? static_cast<const void*>(want.bf16_data()) : want.data();
        EXPECT_EQ(std::memcmp(g, w, got.bytes()), 0)
            << isa_name(isa) << " " << precision_name(precision) << " K=" << K << " N=" << N;
      }
    }
  }
}

const GemmCase kGemmCases[] = {{1, 1, 1},    {1, 37, 5},     {3, 5, 37},      {2, 1280, 320}, {17, 33, 65},
                               {15, 32, 16}, {29, 64, 1001}, {100, 130, 300}, {77, 96, 1537}, {131, 45, 3}};

TEST(Bf16Gemm, MatchesReferenceOnEveryPathBitIdentically) {
  for (const GemmCase& t : kGemmCases) {
    auto a = random_vec(t.M * t.K, 1);
    auto b = random_vec(t.K * t.N, 2);  // K × N
    std::vector<float> bt(b.size());    // N × K, as torch stores a Linear weight
    for (int64_t k = 0; k < t.K; ++k)
      for (int64_t n = 0; n < t.N; ++n) bt[n * t.K + k] = b[k * t.N + n];
    const PackedMatrix p = pack_b(bt.data(), t.K, t.N, /*transposed=*/true, Precision::BF16);
    const PackedMatrix pk = pack_b(b.data(), t.K, t.N, /*transposed=*/false, Precision::BF16);
    ASSERT_EQ(p.precision(), Precision::BF16);
    EXPECT_EQ(p.bytes(), pack_b(b.data(), t.K, t.N, false).bytes() * (t.K + t.K % 2) / (2 * t.K));
    const auto ref_rounded = reference_gemm(rounded(a), t.K, rounded(b), t.M, t.N, t.K);
    const auto ref_f32 = reference_gemm(a, t.K, b, t.M, t.N, t.K);
    std::vector<float> first;
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      for (const PackedMatrix* packed : {&p, &pk}) {
        const int64_t ldc = t.N + 3;
        std::vector<float> c(t.M * ldc, 7.0f);
        gemm(a.data(), t.M, t.K, *packed, c.data(), ldc);
        std::vector<float> got(t.M * t.N);
        for (int64_t i = 0; i < t.M; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            if (j < t.N)
              got[i * t.N + j] = c[i * ldc + j];
            else
              ASSERT_EQ(c[i * ldc + j], 7.0f);  // C's padding is never touched
          }
        const double tight = rel_error(got.data(), ref_rounded), loose = rel_error(got.data(), ref_f32);
        EXPECT_LT(tight, 2e-6) << path.name() << " M=" << t.M << " N=" << t.N << " K=" << t.K;
        EXPECT_LT(loose, 2e-2) << path.name() << " M=" << t.M << " N=" << t.N << " K=" << t.K;
        if (packed == &p && t.K >= 300)
          std::printf("[bf16 gemm %s] M=%" PRId64 " N=%" PRId64 " K=%" PRId64
                      " rel err vs bf16-input ref %.3g, vs f32 ref %.3g\n",
                      path.name().c_str(), t.M, t.N, t.K, tight, loose);
        if (first.empty()) first = got;
        EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)))
            << path.name() << " differs from " << bf16_paths()[0].name() << " M=" << t.M << " N=" << t.N
            << " K=" << t.K;
      }
    }
  }
}

TEST(Bf16Gemm, EpilogueBiasResidualAndAccumulate) {
  const GemmCase t{37, 70, 451};
  auto a = random_vec(t.M * t.K, 3), b = random_vec(t.K * t.N, 4), bias = random_vec(t.N, 5);
  auto res = random_vec(t.M * t.N, 6);
  const PackedMatrix p = pack_b(b.data(), t.K, t.N, false, Precision::BF16);
  const auto ref = reference_gemm(rounded(a), t.K, rounded(b), t.M, t.N, t.K, bias.data(), res.data(), t.N);
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    std::vector<float> c(t.M * t.N);
    Epilogue ep;
    ep.bias = bias.data();
    ep.residual = res.data();
    ep.ldr = t.N;
    gemm(a.data(), t.M, t.K, p, c.data(), t.N, ep);
    EXPECT_LT(rel_error(c.data(), ref), 2e-6) << path.name();
    Epilogue acc;
    acc.accumulate = true;
    gemm(a.data(), t.M, t.K, p, c.data(), t.N, acc);  // C += A·B
    auto twice = reference_gemm(rounded(a), t.K, rounded(b), t.M, t.N, t.K);
    for (size_t i = 0; i < twice.size(); ++i) twice[i] += ref[i];
    EXPECT_LT(rel_error(c.data(), twice), 2e-6) << path.name();
  }
}

TEST(Bf16Gemm, BitIdenticalForAnyThreadCount) {
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    for (const GemmCase& t : {GemmCase{301, 203, 1777}, GemmCase{5, 1000, 64}, GemmCase{1000, 7, 9}}) {
      auto a = random_vec(t.M * t.K, 9), b = random_vec(t.K * t.N, 10), bias = random_vec(t.N, 11);
      const PackedMatrix p = pack_b(b.data(), t.K, t.N, false, Precision::BF16);
      expect_thread_invariant("bf16 gemm " + path.name(), [&] {
        std::vector<float> c(t.M * t.N);
        Epilogue ep;
        ep.bias = bias.data();
        gemm(a.data(), t.M, t.K, p, c.data(), t.N, ep);
        return c;
      });
    }
  }
}

// The conv cases of conv2d_test.cpp that matter here: padding, strides, 1×1, odd K.
struct ConvCase {
  const char* name;
  int64_t N, H, W, Ci, Co;
  int k;
  Conv2dGeometry g;
};

TEST(Bf16Conv2d, MatchesReferenceOnEveryPathBitIdentically) {
  const ConvCase cases[] = {
      {"3x3 same, Ci=3 Co=5 (odd K)", 1, 7, 9, 3, 5, 3, Conv2dGeometry::same(3)},
      {"3x3 same, 37→37, batch 2", 2, 6, 5, 37, 37, 3, Conv2dGeometry::same(3)},
      {"VAE downsample: stride 2, pad bottom/right", 1, 8, 10, 37, 37, 3, {2, 0, 0, 1, 1}},
      {"1x1, 37→64", 2, 5, 3, 37, 64, 1, {}},
      {"1x1, 64→40", 2, 5, 3, 64, 40, 1, {}},
      {"3x3 wide channels 320→33 (K chunks)", 1, 5, 4, 320, 33, 3, Conv2dGeometry::same(3)},
  };
  for (const ConvCase& t : cases) {
    auto x = random_vec(t.N * t.H * t.W * t.Ci, 21), w = random_vec(t.Co * t.Ci * t.k * t.k, 22, -0.3f, 0.3f);
    auto bias = random_vec(t.Co, 23);
    const Conv2dWeights cw = pack_conv2d(w.data(), bias.data(), t.Co, t.Ci, t.k, t.k, Precision::BF16);
    const int64_t Ho = conv2d_out_size(t.H, t.k, t.g.stride, t.g.pad_top, t.g.pad_bottom);
    const int64_t Wo = conv2d_out_size(t.W, t.k, t.g.stride, t.g.pad_left, t.g.pad_right);
    const auto ref_rounded =
        reference_conv2d(rounded(x), rounded(w), t.N, t.H, t.W, t.Ci, t.Co, t.k, t.g, bias.data());
    const auto ref_f32 = reference_conv2d(x, w, t.N, t.H, t.W, t.Ci, t.Co, t.k, t.g, bias.data());
    std::vector<float> first;
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      std::vector<float> y(t.N * Ho * Wo * t.Co);
      conv2d_nhwc(x.data(), t.N, t.H, t.W, cw, t.g, y.data());
      const double tight = rel_error(y.data(), ref_rounded), loose = rel_error(y.data(), ref_f32);
      EXPECT_LT(tight, 2e-6) << path.name() << " " << t.name;
      EXPECT_LT(loose, 2e-2) << path.name() << " " << t.name;
      std::printf("[bf16 conv %s] %s: rel err vs bf16-input ref %.3g, vs f32 ref %.3g\n", path.name().c_str(),
                  t.name, tight, loose);
      if (first.empty()) first = y;
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
          << path.name() << " " << t.name;
    }
  }
}

TEST(Bf16Conv2d, BitIdenticalForAnyThreadCount) {
  const int64_t N = 2, H = 9, W = 11, Ci = 40, Co = 70;
  auto x = random_vec(N * H * W * Ci, 24), w = random_vec(Co * Ci * 9, 25), bias = random_vec(Co, 26);
  const Conv2dWeights cw = pack_conv2d(w.data(), bias.data(), Co, Ci, 3, 3, Precision::BF16);
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    expect_thread_invariant("bf16 conv " + path.name(), [&] {
      std::vector<float> y(N * H * W * Co);
      conv2d_nhwc(x.data(), N, H, W, cw, Conv2dGeometry::same(3), y.data());
      return y;
    });
  }
}

struct AttnCase {
  int64_t batch, q_len, kv_len, heads, head_dim;
  bool causal;
};

// softmax(scale·q·kᵀ)·v in double; with round_p the probabilities are rounded to bf16 before
// the product with v (as the kernel does; the normaliser sums them unrounded).
std::vector<double> ref_attention(const AttnCase& t, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, float scale, bool round_p) {
  const int64_t d = t.head_dim, C = t.heads * d;
  std::vector<double> out(static_cast<size_t>(t.batch * t.q_len * C));
  std::vector<double> p(static_cast<size_t>(t.kv_len));
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t i = 0; i < t.q_len; ++i) {
        const int64_t visible = t.causal ? std::min(t.kv_len, i + 1) : t.kv_len;
        double mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += static_cast<double>(q[(b * t.q_len + i) * C + h * d + c]) *
                   k[(b * t.kv_len + j) * C + h * d + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j < visible; ++j) {
            const double pj = round_p ? bf16_to_f32(f32_to_bf16(static_cast<float>(p[j]))) : p[j];
            o += pj * v[(b * t.kv_len + j) * C + h * d + c];
          }
          out[(b * t.q_len + i) * C + h * d + c] = o / sum;
        }
      }
  return out;
}

// Random q, k, v of a case (seeds seed … seed + 2; scores of a few units), its scale and shape.
struct AttnInputs {
  AttnInputs(const AttnCase& t, uint32_t seed)
      : q(random_vec(t.batch * t.q_len * t.heads * t.head_dim, seed, -2.0f, 2.0f)),
        k(random_vec(t.batch * t.kv_len * t.heads * t.head_dim, seed + 1, -2.0f, 2.0f)),
        v(random_vec(t.batch * t.kv_len * t.heads * t.head_dim, seed + 2)),
        scale(1.0f / std::sqrt(static_cast<float>(t.head_dim))) {
    s.batch = t.batch, s.q_len = t.q_len, s.kv_len = t.kv_len, s.heads = t.heads, s.head_dim = t.head_dim;
  }
  std::vector<float> q, k, v;
  float scale;
  AttentionShape s;
};

TEST(Bf16Attention, MatchesReferenceOnEveryPath) {
  const AttnCase cases[] = {
      {1, 5, 3, 1, 4, false},     {2, 33, 77, 2, 8, false},   {1, 77, 77, 3, 64, true},
      {1, 100, 77, 2, 40, false}, {1, 70, 300, 2, 80, false}, {1, 64, 600, 1, 160, false},
      {2, 300, 301, 1, 40, true}, {1, 29, 513, 2, 41, false}, {1, 1, 1, 1, 4, false}};
  for (const AttnCase& t : cases) {
    const int64_t C = t.heads * t.head_dim;
    const AttnInputs in(t, 31);
    const auto& [q, k, v, scale, s] = in;
    const auto ref_same = ref_attention(t, rounded(q), rounded(k), rounded(v), scale, /*round_p=*/true);
    const auto ref_f32 = ref_attention(t, q, k, v, scale, /*round_p=*/false);
    for (const Path& path : bf16_paths()) {
      ScopedKernelIsa scoped(path.isa, path.dot);
      std::vector<float> out(t.batch * t.q_len * C, NAN);
      attention(q.data(), k.data(), v.data(), out.data(), s, scale, t.causal, Precision::BF16);
      // vs the same rounding of q, k, v and p: what remains is float32 arithmetic, plus the
      // occasional probability that rounds to the neighbouring bf16 value (2⁻⁸ of one weight).
      const double tight = rel_error(out.data(), ref_same), loose = rel_error(out.data(), ref_f32);
      EXPECT_LT(tight, 2e-3) << path.name() << " Lq=" << t.q_len << " Lk=" << t.kv_len << " d=" << t.head_dim;
      EXPECT_LT(loose, 2e-2) << path.name() << " Lq=" << t.q_len << " Lk=" << t.kv_len << " d=" << t.head_dim;
      std::printf("[bf16 attention %s] B=%" PRId64 " Lq=%" PRId64 " Lk=%" PRId64 " H=%" PRId64 " d=%" PRId64
                  " causal=%d: rel err vs bf16 ref %.3g, vs f32 ref %.3g\n",
                  path.name().c_str(), t.batch, t.q_len, t.kv_len, t.heads, t.head_dim, t.causal, tight,
                  loose);
    }
  }
}

// Where the CPU has the BF16 instructions, products widened to FMA (bf16_dot = 0) with scores in
// columns (attention_columns = 1: Sapphire/Emerald Rapids' tuning) for the head dims that take
// them, against the same reference; elsewhere these settings give score rows.
TEST(Bf16Attention, ScoreColumnsOnWidenedProductsMatchTheReference) {
  KernelTuning tuning = kernel_tuning();
  tuning.bf16_dot = 0;
  tuning.attention_columns = 1;
  ScopedKernelTuning scope(tuning);
  const AttnCase cases[] = {{1, 70, 300, 2, 40, false},
                            {2, 100, 301, 1, 40, true},
                            {1, 29, 513, 2, 41, false},
                            {1, 33, 260, 1, 56, true}};
  for (const AttnCase& t : cases) {
    const int64_t C = t.heads * t.head_dim;
    const AttnInputs in(t, 41);
    const auto& [q, k, v, scale, s] = in;
    EXPECT_EQ(detail::attention_by_columns_chosen(s),
              detail::vec_math(kernel_isa()).softmax_columns != nullptr);
    std::vector<float> out(t.batch * t.q_len * C, NAN);
    attention(q.data(), k.data(), v.data(), out.data(), s, scale, t.causal, Precision::BF16);
    const double tight =
        rel_error(out.data(), ref_attention(t, rounded(q), rounded(k), rounded(v), scale, true));
    const double loose = rel_error(out.data(), ref_attention(t, q, k, v, scale, false));
    EXPECT_LT(tight, 2e-3) << "Lk=" << t.kv_len << " d=" << t.head_dim;
    EXPECT_LT(loose, 2e-2) << "Lk=" << t.kv_len << " d=" << t.head_dim;
    std::printf("[bf16 attention, %s] Lq=%" PRId64 " Lk=%" PRId64 " d=%" PRId64
                " causal=%d: rel err vs bf16 ref %.3g, "
                "vs f32 ref %.3g\n",
                kernel_bf16_instructions() ? "widened, scores in columns" : "no BF16 instructions: rows",
                t.q_len, t.kv_len, t.head_dim, t.causal, tight, loose);
    expect_thread_invariant("bf16 attention in columns", [&] {
      std::vector<float> o(out.size());
      attention(q.data(), k.data(), v.data(), o.data(), s, scale, t.causal, Precision::BF16);
      return o;
    });
  }
}

TEST(Bf16Attention, StridedInputsAndThreadInvariance) {
  // q, k, v as the model passes them: slices of one fused qkv matrix (row stride 3C).
  const int64_t B = 2, L = 150, H = 3, d = 40, C = H * d;
  auto qkv = random_vec(B * L * 3 * C, 34, -2.0f, 2.0f);
  AttentionShape s;
  s.batch = B;
  s.q_len = s.kv_len = L;
  s.heads = H;
  s.head_dim = d;
  s.ldq = s.ldk = s.ldv = 3 * C;
  std::vector<float> q(B * L * C), k(q.size()), v(q.size());
  for (int64_t r = 0; r < B * L; ++r)
    for (int64_t c = 0; c < C; ++c) {
      q[r * C + c] = qkv[r * 3 * C + c];
      k[r * C + c] = qkv[r * 3 * C + C + c];
      v[r * C + c] = qkv[r * 3 * C + 2 * C + c];
    }
  const AttnCase t{B, L, L, H, d, false};
  const auto ref = ref_attention(t, rounded(q), rounded(k), rounded(v), 0.3f, true);
  for (const Path& path : bf16_paths()) {
    ScopedKernelIsa scoped(path.isa, path.dot);
    std::vector<float> out(B * L * C);
    attention(qkv.data(), qkv.data() + C, qkv.data() + 2 * C, out.data(), s, 0.3f, false, Precision::BF16);
    EXPECT_LT(rel_error(out.data(), ref), 2e-3) << path.name();
    for (bool causal : {false, true})
      expect_thread_invariant("bf16 attention " + path.name(), [&] {
        std::vector<float> o(B * L * C);
        attention(qkv.data(), qkv.data() + C, qkv.data() + 2 * C, o.data(), s, 0.3f, causal, Precision::BF16);
        return o;
      });
  }
}

}  // namespace
}  // namespace octodiff::kernels::test
