#include "kernels/gemm.h"

#include "core/error.h"
#include "kernel_test_util.h"

namespace octodiff::kernels::test {
namespace {

struct GemmCase {
  int64_t M, N, K;
};

const GemmCase kCases[] = {{1, 1, 1},    {1, 37, 5},    {3, 5, 37},     {2, 1280, 320}, {17, 33, 65},
                           {15, 32, 16}, {29, 64, 1000}, {100, 130, 300}, {77, 96, 769},  {131, 45, 3}};

TEST(Gemm, MatchesDoubleReferenceOnEveryIsa) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const GemmCase& t : kCases) {
      for (bool transposed : {false, true}) {
        const int64_t lda = t.K + 3, ldc = t.N + 5;
        auto a = random_vec(t.M * lda, 1);
        auto b = random_vec(t.K * t.N, 2);  // K × N
        std::vector<float> bt(b.size());    // N × K
        for (int64_t k = 0; k < t.K; ++k)
          for (int64_t n = 0; n < t.N; ++n) bt[n * t.K + k] = b[k * t.N + n];
        PackedMatrix p = transposed ? pack_b(bt.data(), t.K, t.N, true) : pack_b(b.data(), t.K, t.N, false);
        EXPECT_EQ(p.K(), t.K);
        EXPECT_EQ(p.N(), t.N);
        std::vector<float> c(t.M * ldc, 7.0f);
        gemm(a.data(), t.M, lda, p, c.data(), ldc);
        std::vector<float> packed_c(t.M * t.N);
        for (int64_t i = 0; i < t.M; ++i)
          for (int64_t j = 0; j < t.N; ++j) packed_c[i * t.N + j] = c[i * ldc + j];
        for (int64_t i = 0; i < t.M; ++i)  // the padding columns of C are never touched
          for (int64_t j = t.N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], 7.0f);
        const double err =
            rel_error(packed_c.data(), reference_gemm(a, lda, b, t.M, t.N, t.K, nullptr, nullptr, 0));
        EXPECT_LT(err, 1e-5) << isa_name(isa) << " M=" << t.M << " N=" << t.N << " K=" << t.K;
        if (t.K == 1000 || t.K == 769)
          std::printf("[gemm %s] M=%lld N=%lld K=%lld transposed=%d rel err %.3g\n", isa_name(isa).c_str(),
                      (long long)t.M, (long long)t.N, (long long)t.K, transposed, err);
      }
    }
  }
}

TEST(Gemm, EpilogueBiasResidualAndAccumulate) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const GemmCase& t : {GemmCase{37, 70, 450}, GemmCase{1, 5, 3}, GemmCase{16, 33, 17}}) {
      auto a = random_vec(t.M * t.K, 3);
      auto b = random_vec(t.K * t.N, 4);
      auto bias = random_vec(t.N, 5);
      const int64_t ldr = t.N + 2;
      auto res = random_vec(t.M * ldr, 6);
      PackedMatrix p = pack_b(b.data(), t.K, t.N, false);
      std::vector<float> c(t.M * t.N);
      Epilogue ep;
      ep.bias = bias.data();
      ep.residual = res.data();
      ep.ldr = ldr;
      gemm(a.data(), t.M, t.K, p, c.data(), t.N, ep);
      auto ref = reference_gemm(a, t.K, b, t.M, t.N, t.K, bias.data(), res.data(), ldr);
      EXPECT_LT(rel_error(c.data(), ref), 1e-5) << isa_name(isa) << " bias+residual M=" << t.M;

      // accumulate: C += A·B on top of the previous result.
      Epilogue acc;
      acc.accumulate = true;
      gemm(a.data(), t.M, t.K, p, c.data(), t.N, acc);
      auto plain = reference_gemm(a, t.K, b, t.M, t.N, t.K, nullptr, nullptr, 0);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += plain[i];
      EXPECT_LT(rel_error(c.data(), ref), 1e-5) << isa_name(isa) << " accumulate M=" << t.M;
    }
  }
}

TEST(Gemm, AbtMatchesReference) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const GemmCase& t : {GemmCase{77, 77, 64}, GemmCase{3, 40, 5}, GemmCase{50, 1, 400}}) {
      const int64_t lda = t.K + 1, ldb = t.K + 2;
      auto a = random_vec(t.M * lda, 7);
      auto bt = random_vec(t.N * ldb, 8);
      std::vector<float> b(t.K * t.N);
      for (int64_t n = 0; n < t.N; ++n)
        for (int64_t k = 0; k < t.K; ++k) b[k * t.N + n] = bt[n * ldb + k];
      std::vector<float> c(t.M * t.N);
      gemm_abt(a.data(), lda, bt.data(), ldb, c.data(), t.N, t.M, t.N, t.K);
      EXPECT_LT(rel_error(c.data(), reference_gemm(a, lda, b, t.M, t.N, t.K, nullptr, nullptr, 0)), 1e-5)
          << isa_name(isa);
    }
  }
}

TEST(Gemm, BitIdenticalForAnyThreadCount) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const GemmCase& t : {GemmCase{301, 203, 777}, GemmCase{5, 1000, 64}, GemmCase{1000, 7, 9}}) {
      auto a = random_vec(t.M * t.K, 9);
      auto b = random_vec(t.K * t.N, 10);
      auto bias = random_vec(t.N, 11);
      PackedMatrix p = pack_b(b.data(), t.K, t.N, false);
      expect_thread_invariant("gemm " + isa_name(isa), [&] {
        std::vector<float> c(t.M * t.N);
        Epilogue ep;
        ep.bias = bias.data();
        gemm(a.data(), t.M, t.K, p, c.data(), t.N, ep);
        return c;
      });
    }
  }
}

TEST(Gemm, RejectsUnpackedWeights) {
  PackedMatrix empty;
  float a = 1, c = 0;
  EXPECT_THROW(gemm(&a, 1, 1, empty, &c, 1), Error);
}

}  // namespace
}  // namespace octodiff::kernels::test
