#include "kernels/activations.h"

#include "kernel_test_util.h"

namespace octodiff::kernels::test {
namespace {

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double quick_gelu_ref(double x) { return x / (1 + std::exp(-1.702 * x)); }
// The textbook forms, rewritten without the cancellation of 1 + erf / 1 + tanh in the
// negative tail (0.5·(1 + tanh u) = 1 / (1 + exp(−2u)) exactly).
double gelu_erf_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_ref(double x) {
  return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Inputs over the range activations see, plus edge values; n not a multiple of any width.
std::vector<float> inputs() {
  std::vector<float> x = random_vec(10007, 51, -12.0f, 12.0f);
  for (int i = -150000; i <= 150000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);  // dense sweep of [-15, 15]
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f, -0.5f, 3.0f, -3.0f, 8.0f, -8.0f, 30.0f,
                  -30.0f, 90.0f, -90.0f})
    x.push_back(v);
  return x;
}

// Max relative error per element where the reference is a normal float; absolute elsewhere.
double max_rel(const std::vector<float>& y, const std::vector<float>& x, double (*ref)(double), double* worst_x) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = ref(x[i]);
    const double e = std::abs(r) > 1e-37 ? std::abs(y[i] - r) / std::abs(r) : std::abs(y[i] - r) / 1e-37;
    if (!(e <= worst)) {
      worst = e;
      *worst_x = x[i];
    }
  }
  return worst;
}

TEST(Activations, AccurateAgainstDoubleFormulasOnEveryIsa) {
  const auto x = inputs();
  struct Fn {
    const char* name;
    std::function<void(const float*, int64_t, float*)> f;
    double (*ref)(double);
  };
  const Fn fns[] = {
      {"silu", [](const float* a, int64_t n, float* b) { silu(a, n, b); }, silu_ref},
      {"quick_gelu", [](const float* a, int64_t n, float* b) { quick_gelu(a, n, b); }, quick_gelu_ref},
      {"gelu_erf", [](const float* a, int64_t n, float* b) { gelu(a, n, b, Gelu::Erf); }, gelu_erf_ref},
      {"gelu_tanh", [](const float* a, int64_t n, float* b) { gelu(a, n, b, Gelu::Tanh); }, gelu_tanh_ref},
  };
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (const Fn& fn : fns) {
      std::vector<float> y(x.size());
      fn.f(x.data(), static_cast<int64_t>(x.size()), y.data());
      double wx = 0;
      const double err = max_rel(y, x, fn.ref, &wx);
      std::printf("[activation %s] %-10s max rel err %.3g (at x=%g)\n", isa_name(isa).c_str(), fn.name, err, wx);
      EXPECT_LT(err, 2e-6) << isa_name(isa) << " " << fn.name << " at x=" << wx;
      std::vector<float> inplace = x;  // y may alias x
      fn.f(inplace.data(), static_cast<int64_t>(x.size()), inplace.data());
      EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)));
    }
  }
}

TEST(Activations, GegluGatesTheFirstHalf) {
  for (Isa isa : available_isas()) {
    ScopedKernelIsa scoped(isa);
    for (Gelu kind : {Gelu::Erf, Gelu::Tanh}) {
      const int64_t rows = 7, inner = 37;
      auto u = random_vec(rows * 2 * inner, 52, -4.0f, 4.0f);
      std::vector<float> y(rows * inner);
      geglu(u.data(), rows, inner, y.data(), kind);
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < inner; ++j) {
          const double g = u[r * 2 * inner + inner + j];
          const double ref = u[r * 2 * inner + j] * (kind == Gelu::Erf ? gelu_erf_ref(g) : gelu_tanh_ref(g));
          worst = std::max(worst, std::abs(y[r * inner + j] - ref) / std::max(1e-6, std::abs(ref)));
        }
      EXPECT_LT(worst, 3e-6) << isa_name(isa);
    }
  }
}

TEST(Activations, AddScaleAndChannelBroadcast) {
  auto a = random_vec(1001, 53), b = random_vec(1001, 54);
  std::vector<float> y(1001);
  add(a.data(), b.data(), 1001, y.data());
  for (int i = 0; i < 1001; ++i) ASSERT_EQ(y[i], a[i] + b[i]);
  scale(y.data(), 1001, 0.5f);
  for (int i = 0; i < 1001; ++i) ASSERT_EQ(y[i], (a[i] + b[i]) * 0.5f);

  const int64_t N = 2, HW = 5, C = 37;
  auto x = random_vec(N * HW * C, 55), v = random_vec(N * C, 56);
  auto x0 = x;
  add_per_sample_channel(x.data(), N, HW, C, v.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < HW; ++p)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (n * HW + p) * C + c;
        ASSERT_EQ(x[i], x0[i] + v[n * C + c]);
      }
}

TEST(Activations, BitIdenticalForAnyThreadCount) {
  auto x = random_vec(100003, 57, -6.0f, 6.0f);
  for (Gelu kind : {Gelu::Erf, Gelu::Tanh})
    expect_thread_invariant("gelu", [&] {
      std::vector<float> y(x.size());
      gelu(x.data(), static_cast<int64_t>(x.size()), y.data(), kind);
      return y;
    });
}

}  // namespace
}  // namespace octodiff::kernels::test
