// Normalisations with float32-or-better statistics.
#pragma once

#include <cstdint>

namespace octodiff::kernels {

// GroupNorm on NHWC: x is N × HW × C; channels split into G contiguous groups; statistics per
// (sample, group) over HW × C/G values; y = (x − mean) · rsqrt(var + eps) · gamma + beta, then
// SiLU when `silu` is set (the fused GroupNorm+SiLU of every resnet). y may alias x.
// Reductions use fixed-size chunks so results do not depend on the thread count.
void group_norm_nhwc(const float* x, int64_t N, int64_t HW, int64_t C, int64_t G, float eps,
                     const float* gamma, const float* beta, float* y, bool silu);

// LayerNorm over the last axis of a rows × C matrix. y may alias x.
void layer_norm(const float* x, int64_t rows, int64_t C, float eps, const float* gamma,
                const float* beta, float* y);

}  // namespace octodiff::kernels
