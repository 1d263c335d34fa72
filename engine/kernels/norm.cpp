// GroupNorm and LayerNorm with double-precision statistics accumulated over fixed chunks in a
// fixed order: exact to float rounding and independent of the thread count.
#include "kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {
namespace {

constexpr int64_t kChunkPixels = 64;

// Per (sample, pixel chunk, channel): Σx and Σx² in double, into s1 and s2 (N·chunks·C each).
// Chunk q of sample n holds pixels [q·kChunkPixels, (q+1)·kChunkPixels); partials are combined
// later in a fixed order.
void channel_moments(const float* x, int64_t N, int64_t HW, int64_t C, double* s1, double* s2) {
  const int64_t chunks = (HW + kChunkPixels - 1) / kChunkPixels;
  parallel_for(N * chunks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / chunks, p0 = (t % chunks) * kChunkPixels;
      const int64_t p1 = std::min(HW, p0 + kChunkPixels);
      double* a1 = s1 + t * C;
      double* a2 = s2 + t * C;
      std::fill(a1, a1 + C, 0.0);
      std::fill(a2, a2 + C, 0.0);
      for (int64_t p = p0; p < p1; ++p) {
        const float* xp = x + (n * HW + p) * C;
        for (int64_t c = 0; c < C; ++c) {
          const double v = xp[c];
          a1[c] += v;
          a2[c] += v * v;
        }
      }
    }
  });
}

// Sums the partials of each (sample, group) in a fixed order (chunks, then channels).
std::vector<double> group_totals(const double* partial, int64_t N, int64_t chunks, int64_t C, int64_t G) {
  const int64_t cg = C / G;
  std::vector<double> total(static_cast<size_t>(N * G), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0;
      for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
        double sc = 0;
        for (int64_t q = 0; q < chunks; ++q) sc += partial[(n * chunks + q) * C + c];
        s += sc;
      }
      total[n * G + g] = s;
    }
  return total;
}

}  // namespace

void group_norm_nhwc(const float* x, int64_t N, int64_t HW, int64_t C, int64_t G, float eps,
                     const float* gamma, const float* beta, float* y, bool silu) {
  if (G <= 0 || C % G != 0) fail(cat("group_norm: ", C, " channels do not split into ", G, " groups"));
  if (N <= 0 || HW <= 0) return;
  const int64_t cg = C / G, chunks = (HW + kChunkPixels - 1) / kChunkPixels;
  const double count = static_cast<double>(HW * cg);

  // One pass of Σx and Σx² in double: var = E[x²] − E[x]² loses only ≈ 2⁻⁵³·mean²/var, far
  // below float resolution for any activation, so this matches the two-pass variance.
  // The partials (16 MB at 512×512 × 256 channels) from the caller's allocator, like the
  // activations (the pipeline's arena keeps and reuses them): from the heap, every call mapped a
  // fresh buffer and faulted it in (~110 MB of page faults per 512×512 VAE decode).
  const int64_t partials = N * chunks * C;
  const detail::CallScratch moments(static_cast<size_t>(2 * partials) * sizeof(double));
  double* const s1 = moments.get<double>();
  double* const s2 = s1 + partials;
  channel_moments(x, N, HW, C, s1, s2);
  std::vector<double> mean = group_totals(s1, N, chunks, C, G);
  std::vector<double> var = group_totals(s2, N, chunks, C, G);
  for (size_t i = 0; i < mean.size(); ++i) {
    mean[i] /= count;
    var[i] = std::max(0.0, var[i] / count - mean[i] * mean[i]);
  }

  // y = (x − mean) · (rsqrt(var + eps) · gamma) + beta, per-channel factors in float.
  std::vector<float> mul(static_cast<size_t>(N * C)), shift_mean(static_cast<size_t>(N * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cg;
      const float rstd = static_cast<float>(1.0 / std::sqrt(var[n * G + g] + static_cast<double>(eps)));
      mul[n * C + c] = rstd * (gamma ? gamma[c] : 1.0f);
      shift_mean[n * C + c] = static_cast<float>(mean[n * G + g]);
    }
  const auto act = detail::vec_math(kernel_isa()).silu;
  parallel_for(N * chunks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / chunks, p0 = (t % chunks) * kChunkPixels;
      const int64_t p1 = std::min(HW, p0 + kChunkPixels);
      const float* a = mul.data() + n * C;
      const float* m = shift_mean.data() + n * C;
      for (int64_t p = p0; p < p1; ++p) {
        const float* xp = x + (n * HW + p) * C;
        float* yp = y + (n * HW + p) * C;
        for (int64_t c = 0; c < C; ++c) yp[c] = (xp[c] - m[c]) * a[c] + (beta ? beta[c] : 0.0f);
      }
      if (silu) act(y + (n * HW + p0) * C, (p1 - p0) * C, y + (n * HW + p0) * C);
    }
  });
}

// Σ f(x[c]) in double over 8 interleaved partial sums combined in a fixed order: the compiler
// can vectorise it (a single running sum is a serial chain) and the result stays deterministic.
template <typename F>
double row_sum(const float* x, int64_t C, F f) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= C; c += 8)
    for (int j = 0; j < 8; ++j) part[j] += f(x[c + j]);
  for (int j = 0; c + j < C; ++j) part[j] += f(x[c + j]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

void layer_norm(const float* x, int64_t rows, int64_t C, float eps, const float* gamma,
                const float* beta, float* y) {
  if (C <= 0) return;
  const int64_t grain = std::max<int64_t>(1, 4096 / C);
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      float* yr = y + r * C;
      const double mean = row_sum(xr, C, [](float v) { return static_cast<double>(v); }) / static_cast<double>(C);
      const double q = row_sum(xr, C, [mean](float v) {
        const double d = v - mean;
        return d * d;
      });
      const float rstd = static_cast<float>(1.0 / std::sqrt(q / static_cast<double>(C) + eps));
      const float mf = static_cast<float>(mean);
      for (int64_t c = 0; c < C; ++c)
        yr[c] = (xr[c] - mf) * (rstd * (gamma ? gamma[c] : 1.0f)) + (beta ? beta[c] : 0.0f);
    }
  }, grain);
}

}  // namespace octodiff::kernels
