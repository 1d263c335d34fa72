// Multi-head softmax attention, flash style: keys and values are visited in tiles with an
// online softmax, so the Lq × Lk score matrix of all heads is never held at once (4096 tokens
// at 64×64 latents would be 64 MiB per head).
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace octodiff::kernels {

struct AttentionShape {
  int64_t batch = 1;
  int64_t q_len = 0, kv_len = 0;
  int64_t heads = 1, head_dim = 0;
  // Row strides (in floats) of q, k, v and out; head h occupies columns [h·d, (h+1)·d).
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  // Strides between batch entries (in floats); 0 means rows × ld (tightly stacked).
  int64_t batch_stride_q = 0, batch_stride_k = 0, batch_stride_v = 0, batch_stride_o = 0;
};

// out[b, i, h] = Σ_j softmax_j(scale · q[b,i,h] · k[b,j,h] + mask) · v[b,j,h]
// causal: key j is visible to query i only when j <= i (CLIP's text encoder).
// BF16: q·k and p·v take bf16-rounded operands (products summed in float32, gemm.h); the
// scores, the softmax and the output stay float32. With Split bf16 activations (gemm.h) it is
// the float32 computation.
void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
               float scale, bool causal, Precision precision = Precision::F32);

}  // namespace octodiff::kernels
