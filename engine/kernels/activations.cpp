// Element-wise activations: the ISA's vector maps over fixed slices of the input, in parallel.
#include "kernels/activations.h"

#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {
namespace detail {
namespace {

// The generic path evaluates the textbook formulas in double and rounds once.
void silu_generic(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

void quick_gelu_generic(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
  }
}

void gelu_tanh_generic(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // 0.5·(1 + tanh u) = 1 / (1 + exp(−2u)): the same function without the tail cancellation.
    y[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (v + 0.044715 * v * v * v))));
  }
}

// x·Φ(x) = ½·x·erfc(−x/√2): erfc keeps full relative accuracy in the negative tail.
void gelu_erf_generic(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * std::erfc(-v * 0.70710678118654752));
  }
}

float softmax_update_generic(float* s, int n, float scale, float* m, float* l) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    s[i] *= scale;
    mx = std::max(mx, s[i]);
  }
  const float m_new = std::max(*m, mx);
  const float alpha = softmax_rescale(*m, m_new);
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m_new);
    sum += s[i];
  }
  *l = *l * alpha + sum;
  *m = m_new;
  return alpha;
}

float softmax_update_bf16_generic(float* s, int n, float scale, float* m, float* l, uint16_t* p) {
  const float alpha = softmax_update_generic(s, n, scale, m, l);
  to_bf16_generic(s, n, p);
  return alpha;
}

}  // namespace

const VecMath& vec_math_generic() {
  static const VecMath v{&silu_generic,           &gelu_tanh_generic, &quick_gelu_generic,
                         &softmax_update_generic, &gelu_erf_generic,  &softmax_update_bf16_generic};
  return v;
}

const VecMath& vec_math(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return vec_math_avx512();
    case Isa::Avx2: return vec_math_avx2();
    case Isa::Generic: break;
  }
  return vec_math_generic();
}

}  // namespace detail

namespace {

constexpr int64_t kGrain = 1 << 14;

template <typename Fn>
void map_parallel(const float* x, int64_t n, float* y, Fn fn) {
  parallel_for((n + kGrain - 1) / kGrain, [&](int64_t b, int64_t e) {
    const int64_t i0 = b * kGrain, i1 = std::min(n, e * kGrain);
    fn(x + i0, i1 - i0, y + i0);
  });
}

}  // namespace

void silu(const float* x, int64_t n, float* y) { map_parallel(x, n, y, detail::vec_math(kernel_isa()).silu); }

void quick_gelu(const float* x, int64_t n, float* y) {
  map_parallel(x, n, y, detail::vec_math(kernel_isa()).quick_gelu);
}

void relu(const float* x, int64_t n, float* y) {
  map_parallel(x, n, y, [](const float* a, int64_t m, float* b) {
    for (int64_t i = 0; i < m; ++i) b[i] = a[i] < 0.0f ? 0.0f : a[i];  // vectorised by the compiler
  });
}

void gelu(const float* x, int64_t n, float* y, Gelu kind) {
  const detail::VecMath& vm = detail::vec_math(kernel_isa());
  map_parallel(x, n, y, kind == Gelu::Erf ? vm.gelu_erf : vm.gelu_tanh);
}

void geglu(const float* u, int64_t rows, int64_t inner, float* y, Gelu kind) {
  const detail::VecMath& vm = detail::vec_math(kernel_isa());
  const auto act = kind == Gelu::Erf ? vm.gelu_erf : vm.gelu_tanh;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, inner));
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* a = u + r * 2 * inner;
      float* yr = y + r * inner;
      act(a + inner, inner, yr);
      for (int64_t j = 0; j < inner; ++j) yr[j] *= a[j];
    }
  }, grain);
}

void add(const float* a, const float* b, int64_t n, float* y) {
  parallel_for((n + kGrain - 1) / kGrain, [&](int64_t c0, int64_t c1) {
    const int64_t i1 = std::min(n, c1 * kGrain);
    for (int64_t i = c0 * kGrain; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

void add_per_sample_channel(float* x, int64_t N, int64_t HW, int64_t C, const float* v) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C));
  parallel_for(N * HW, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* xp = x + p * C;
      const float* vn = v + (p / HW) * C;
      for (int64_t c = 0; c < C; ++c) xp[c] += vn[c];
    }
  }, grain);
}

void scale(float* x, int64_t n, float s) {
  parallel_for((n + kGrain - 1) / kGrain, [&](int64_t c0, int64_t c1) {
    const int64_t i1 = std::min(n, c1 * kGrain);
    for (int64_t i = c0 * kGrain; i < i1; ++i) x[i] *= s;
  });
}

}  // namespace octodiff::kernels
