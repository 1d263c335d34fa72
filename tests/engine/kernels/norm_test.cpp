#include "kernels/norm.h"

#include <cstring>

#include "core/arena.h"
#include "core/error.h"
#include "kernel_test_util.h"

namespace octodiff::kernels::test {
namespace {

// torch's GroupNorm: two-pass (mean-subtracted) biased variance, in double here.
std::vector<double> ref_group_norm(const std::vector<float>& x, int64_t N, int64_t HW, int64_t C, int64_t G,
                                   double eps, const std::vector<float>& gamma, const std::vector<float>& beta,
                                   bool silu) {
  std::vector<double> y(x.size());
  const int64_t cg = C / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0;
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) s += x[(n * HW + p) * C + c];
      const double mean = s / (HW * cg);
      double q = 0;
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) q += std::pow(x[(n * HW + p) * C + c] - mean, 2);
      const double rstd = 1.0 / std::sqrt(q / (HW * cg) + eps);
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const int64_t i = (n * HW + p) * C + c;
          double v = (x[i] - mean) * rstd * gamma[c] + beta[c];
          if (silu) v = v / (1.0 + std::exp(-v));
          y[i] = v;
        }
    }
  return y;
}

TEST(GroupNorm, MatchesTwoPassDoubleReferenceOnEveryIsa) {
  struct Case {
    int64_t N, HW, C, G;
    float offset;  // a large common offset makes E[x²] − E[x]² lose digits; two-pass must not
  };
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const Case& t : {Case{1, 7, 5, 5, 0}, Case{2, 65, 64, 32, 0}, Case{1, 300, 37, 1, 0},
                          Case{2, 130, 96, 32, 100}, Case{1, 1, 32, 32, 3}}) {
      for (bool silu : {false, true}) {
        auto x = random_vec(t.N * t.HW * t.C, 41, t.offset - 1, t.offset + 1);
        auto gamma = random_vec(t.C, 42, 0.5f, 1.5f);
        auto beta = random_vec(t.C, 43);
        std::vector<float> y(x.size());
        group_norm_nhwc(x.data(), t.N, t.HW, t.C, t.G, 1e-5f, gamma.data(), beta.data(), y.data(), silu);
        const auto ref = ref_group_norm(x, t.N, t.HW, t.C, t.G, 1e-5, gamma, beta, silu);
        const double err = rel_error(y.data(), ref);
        // The input itself is only float-exact: (x − mean) carries ≈ |offset|·2⁻²⁴ of rounding.
        const double tol = 2e-6 * std::max(1.0f, t.offset);
        EXPECT_LT(err, tol) << isa_name(isa) << " C=" << t.C << " G=" << t.G << " silu=" << silu;
        std::printf("[group_norm %s] N=%lld HW=%lld C=%lld G=%lld offset=%g silu=%d rel err %.3g\n",
                    isa_name(isa).c_str(), (long long)t.N, (long long)t.HW, (long long)t.C, (long long)t.G,
                    t.offset, silu, err);
        // In place gives the same bits.
        std::vector<float> inplace = x;
        group_norm_nhwc(inplace.data(), t.N, t.HW, t.C, t.G, 1e-5f, gamma.data(), beta.data(), inplace.data(),
                        silu);
        EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)));
      }
    }
  }
}

TEST(GroupNorm, BitIdenticalForAnyThreadCount) {
  auto x = random_vec(2 * 1000 * 64, 44);
  auto gamma = random_vec(64, 45), beta = random_vec(64, 46);
  expect_thread_invariant("group_norm", [&] {
    std::vector<float> y(x.size());
    group_norm_nhwc(x.data(), 2, 1000, 64, 32, 1e-6f, gamma.data(), beta.data(), y.data(), true);
    return y;
  });
}

// Its double-precision partial sums (N · pixel chunks · C of each moment) come from the caller's
// allocator, as activations do: under the pipeline's caching arena a second call takes nothing
// from the system (from the heap, each call mapped and faulted in a fresh buffer: ~110 MB of page
// faults per 512×512 VAE decode). The result is the same either way.
TEST(GroupNorm, PartialSumsComeFromTheScopedAllocator) {
  const int64_t N = 1, HW = 64 * 64, C = 128, G = 32;
  auto x = random_vec(N * HW * C, 47);
  auto gamma = random_vec(C, 48), beta = random_vec(C, 49);
  std::vector<float> heap(x.size()), first(x.size()), second(x.size());
  group_norm_nhwc(x.data(), N, HW, C, G, 1e-6f, gamma.data(), beta.data(), heap.data(), true);
  CachingArena arena;
  {
    AllocatorScope scope(&arena);
    group_norm_nhwc(x.data(), N, HW, C, G, 1e-6f, gamma.data(), beta.data(), first.data(), true);
    const size_t slabs = arena.system_allocations();
    group_norm_nhwc(x.data(), N, HW, C, G, 1e-6f, gamma.data(), beta.data(), second.data(), true);
    EXPECT_EQ(arena.system_allocations(), slabs);
  }
  const size_t partials = static_cast<size_t>(N * (HW / 64) * C) * 2 * sizeof(double);
  EXPECT_GE(arena.peak_bytes_in_use(), partials);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
  EXPECT_EQ(0, std::memcmp(heap.data(), first.data(), heap.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(heap.data(), second.data(), heap.size() * sizeof(float)));
}

TEST(GroupNorm, RejectsChannelsNotDivisibleByGroups) {
  std::vector<float> x(10);
  EXPECT_THROW(group_norm_nhwc(x.data(), 1, 2, 5, 2, 1e-5f, nullptr, nullptr, x.data(), false), Error);
}

TEST(LayerNorm, MatchesDoubleReference) {
  for (int64_t C : {1, 5, 37, 320, 1280}) {
    const int64_t rows = 9;
    auto x = random_vec(rows * C, 47, 2.0f, 4.0f);
    auto gamma = random_vec(C, 48), beta = random_vec(C, 49);
    std::vector<float> y(x.size());
    layer_norm(x.data(), rows, C, 1e-5f, gamma.data(), beta.data(), y.data());
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, q = 0;
      for (int64_t c = 0; c < C; ++c) s += x[r * C + c];
      const double mean = s / C;
      for (int64_t c = 0; c < C; ++c) q += std::pow(x[r * C + c] - mean, 2);
      const double rstd = 1.0 / std::sqrt(q / C + 1e-5);
      for (int64_t c = 0; c < C; ++c) ref[r * C + c] = (x[r * C + c] - mean) * rstd * gamma[c] + beta[c];
    }
    const double err = rel_error(y.data(), ref);
    EXPECT_LT(err, 4e-6) << "C=" << C;
    std::printf("[layer_norm] C=%lld rel err %.3g\n", (long long)C, err);
    layer_norm(x.data(), rows, C, 1e-5f, gamma.data(), beta.data(), x.data());  // in place
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), y.size() * sizeof(float)));
  }
}

}  // namespace
}  // namespace octodiff::kernels::test
