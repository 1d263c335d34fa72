// Multi-head attention with its projections — diffusers' `Attention` (UNet self/cross and the
// VAE's single-head mid-block attention) and CLIP's causal self-attention.
//
// Self-attention fuses the q, k, v projections into one GEMM; cross-attention fuses k and v of
// the text context. The score matrix itself is never formed (kernels/attention.h).
#pragma once

#include <string>

#include "models/layers.h"

namespace octodiff {

struct AttentionNames {
  std::string q, k, v, out;  // full prefixes, e.g. "<p>.to_q"
};

class MultiHeadAttention {
 public:
  // channels = query width; context_dim = key/value input width (== channels for self-attention).
  static MultiHeadAttention load(WeightSource& w, const AttentionNames& names, int64_t channels,
                                 int64_t context_dim, int64_t heads, bool qkv_bias, bool self_attention,
                                 kernels::Precision precision, bool causal = false);

  // x: N × L × C. context: N × Lk × context_dim (ignored for self-attention). The output
  // projection adds `residual` (N × L × C) when given.
  Tensor operator()(const Tensor& x, const Tensor* context, const Tensor* residual) const;

  int64_t heads() const { return heads_; }

 private:
  int64_t channels_ = 0, heads_ = 1;
  bool self_ = true, causal_ = false;
  kernels::Precision precision_ = kernels::Precision::F32;  // of the projections and q·k, p·v
  Linear qkv_;  // self: C -> 3C
  Linear q_;    // cross: C -> C
  Linear kv_;   // cross: context_dim -> 2C
  Linear out_;
};

}  // namespace octodiff
