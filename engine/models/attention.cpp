#include "models/attention.h"

#include <cmath>

#include "core/error.h"
#include "kernels/attention.h"

namespace octodiff {

MultiHeadAttention MultiHeadAttention::load(WeightSource& w, const AttentionNames& n, int64_t channels,
                                            int64_t context_dim, int64_t heads, bool qkv_bias,
                                            bool self_attention, kernels::Precision precision, bool causal) {
  MultiHeadAttention a;
  a.channels_ = channels;
  a.heads_ = heads;
  a.self_ = self_attention;
  a.causal_ = causal;
  a.precision_ = precision;
  if (channels % heads) fail("internal: ", channels, " channels for ", heads, " heads");
  if (self_attention) {
    a.qkv_ = Linear::load_fused(w, {n.q, n.k, n.v}, channels, channels, qkv_bias, precision);
  } else {
    a.q_ = Linear::load(w, n.q, channels, channels, qkv_bias, precision);
    a.kv_ = Linear::load_fused(w, {n.k, n.v}, context_dim, channels, qkv_bias, precision);
  }
  a.out_ = Linear::load(w, n.out, channels, channels, /*has_bias=*/true, precision);
  return a;
}

Tensor MultiHeadAttention::operator()(const Tensor& x, const Tensor* context, const Tensor* residual) const {
  const int64_t N = x.dim(0), L = x.dim(1), C = channels_;
  kernels::AttentionShape s;
  s.batch = N;
  s.q_len = L;
  s.heads = heads_;
  s.head_dim = C / heads_;
  Tensor o = Tensor::empty({N, L, C});
  s.ldo = C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  if (self_) {
    Tensor qkv = qkv_(x);  // N × L × 3C
    s.kv_len = L;
    s.ldq = s.ldk = s.ldv = 3 * C;
    kernels::attention(qkv.data(), qkv.data() + C, qkv.data() + 2 * C, o.data(), s, scale, causal_,
                       precision_);
  } else {
    if (!context || context->dim(0) != N) fail("internal: cross-attention without a matching context");
    Tensor q = q_(x);          // N × L × C
    Tensor kv = kv_(*context);  // N × Lk × 2C
    s.kv_len = context->dim(1);
    s.ldq = C;
    s.ldk = s.ldv = 2 * C;
    kernels::attention(q.data(), kv.data(), kv.data() + C, o.data(), s, scale, causal_, precision_);
  }
  return out_(o, residual);
}

}  // namespace octodiff
