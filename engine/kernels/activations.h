// Element-wise activations and the GEGLU gate. y may alias x.
#pragma once

#include <cstdint>

namespace octodiff::kernels {

enum class Gelu { Erf, Tanh };  // exact (torch) or tanh approximation (Flax nn.gelu default)

void silu(const float* x, int64_t n, float* y);
void gelu(const float* x, int64_t n, float* y, Gelu kind);
void quick_gelu(const float* x, int64_t n, float* y);  // x · sigmoid(1.702 x)
void relu(const float* x, int64_t n, float* y);        // max(x, 0); NaN stays NaN, as in torch

// u is rows × (2·inner): y[r, j] = u[r, j] · gelu(u[r, inner + j]); y is rows × inner and
// must not overlap u.
void geglu(const float* u, int64_t rows, int64_t inner, float* y, Gelu kind);

// y[i] = a[i] + b[i]
void add(const float* a, const float* b, int64_t n, float* y);
// x is N × HW × C; x[n, p, c] += v[n, c]  (the resnet's time-embedding broadcast)
void add_per_sample_channel(float* x, int64_t N, int64_t HW, int64_t C, const float* v);
void scale(float* x, int64_t n, float s);

}  // namespace octodiff::kernels
