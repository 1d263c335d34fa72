#include "models/unet_blocks.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/activations.h"
#include "kernels/tensor_ops.h"

namespace octodiff {

ResnetBlock2D ResnetBlock2D::load(WeightSource& w, const std::string& p, int64_t in, int64_t out,
                                  int64_t temb_channels, int64_t groups, float eps,
                                  kernels::Precision precision) {
  ResnetBlock2D r;
  r.in_ = in;
  r.out_ = out;
  r.norm1_ = GroupNorm::load(w, p + ".norm1", in, groups, eps);
  r.conv1_ = Conv2d::load_same(w, p + ".conv1", in, out, 3, precision);
  r.has_temb_ = temb_channels > 0;
  if (r.has_temb_)
    r.time_emb_proj_ = Linear::load(w, p + ".time_emb_proj", temb_channels, out, true, precision);
  r.norm2_ = GroupNorm::load(w, p + ".norm2", out, groups, eps);
  r.conv2_ = Conv2d::load_same(w, p + ".conv2", out, out, 3, precision);
  r.has_shortcut_ = in != out;
  if (r.has_shortcut_)
    r.shortcut_ = Linear::load(w, p + ".conv_shortcut", in, out, true, precision, /*from_conv1x1=*/true);
  return r;
}

Tensor ResnetBlock2D::operator()(const Tensor& x, const Tensor* temb_silu) const {
  Tensor h = conv1_(norm1_(x, /*silu=*/true));
  if (has_temb_) {
    if (!temb_silu) fail("internal: resnet needs a time embedding");
    Tensor t = time_emb_proj_(*temb_silu);  // N × out
    kernels::add_per_sample_channel(h.data(), h.dim(0), h.dim(1) * h.dim(2), out_, t.data());
  }
  h = norm2_(h, /*silu=*/true);
  // Dropout is the identity at inference. The residual is fused into conv2's epilogue.
  if (has_shortcut_) {
    Tensor r = shortcut_(x);
    return conv2_(h, &r);
  }
  return conv2_(h, &x);
}

BasicTransformerBlock BasicTransformerBlock::load(WeightSource& w, const std::string& p, int64_t C,
                                                  int64_t context_dim, int64_t heads,
                                                  kernels::Precision precision) {
  BasicTransformerBlock b;
  b.norm1_ = LayerNorm::load(w, p + ".norm1", C, 1e-5f);
  b.norm2_ = LayerNorm::load(w, p + ".norm2", C, 1e-5f);
  b.norm3_ = LayerNorm::load(w, p + ".norm3", C, 1e-5f);
  b.attn1_ = MultiHeadAttention::load(
      w, {p + ".attn1.to_q", p + ".attn1.to_k", p + ".attn1.to_v", p + ".attn1.to_out.0"}, C, C, heads,
      /*qkv_bias=*/false, /*self=*/true, precision);
  b.attn2_ = MultiHeadAttention::load(
      w, {p + ".attn2.to_q", p + ".attn2.to_k", p + ".attn2.to_v", p + ".attn2.to_out.0"}, C, context_dim,
      heads, /*qkv_bias=*/false, /*self=*/false, precision);
  b.ff_in_ = Linear::load(w, p + ".ff.net.0.proj", C, 8 * C, true, precision);
  b.ff_out_ = Linear::load(w, p + ".ff.net.2", 4 * C, C, true, precision);
  return b;
}

Tensor BasicTransformerBlock::self_attention(const Tensor& x) const { return attn1_(norm1_(x), nullptr, &x); }

Tensor BasicTransformerBlock::after_self_attention(const Tensor& x0, const Tensor& context,
                                                   const Numerics& numerics) const {
  const Tensor x = attn2_(norm2_(x0), &context, &x0);
  // GEGLU MLP, a block of tokens at a time: its 8C-wide intermediate would otherwise be the largest
  // activation of the whole UNet (84 MB at 64×64 latents, batch 2). Rows are independent and the
  // GEMM's sums do not depend on how rows are grouped, so the result is the same to the bit.
  const Tensor h = norm3_(x);
  const int64_t C = x.dim(-1), rows = x.numel() / C, inner = ff_out_.in;
  const int64_t block = numerics.mlp_rows_per_block > 0 ? std::min(rows, numerics.mlp_rows_per_block) : rows;
  Tensor y = Tensor::empty(x.shape());
  if (takes_guided_pairs(x.dim(0), ff_in_.weight.precision())) {  // layers.h: ScopedGuidedPairs
    const int64_t half = rows / 2, pair_block = std::max<int64_t>(1, block / 2);
    Tensor u = Tensor::empty({2, pair_block, 2 * inner});
    Tensor g = Tensor::empty({2, pair_block, inner});
    float* uu = u.data();
    float* uc = uu + pair_block * 2 * inner;
    float* gu = g.data();
    float* gc = gu + pair_block * inner;
    for (int64_t r0 = 0; r0 < half; r0 += pair_block) {
      const int64_t n = std::min(pair_block, half - r0), c0 = half + r0;
      ff_in_.forward_pair(h.data() + r0 * C, h.data() + c0 * C, n, uu, uc);
      kernels::geglu(uu, n, inner, gu, numerics.geglu_gelu());
      kernels::geglu(uc, n, inner, gc, numerics.geglu_gelu());
      ff_out_.forward_pair(gu, gc, n, y.data() + r0 * C, y.data() + c0 * C, x.data() + r0 * C, x.data() + c0 * C);
    }
    return y;
  }
  Tensor u = Tensor::empty({block, 2 * inner});  // [value half | gate half]
  Tensor g = Tensor::empty({block, inner});
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    ff_in_.forward(h.data() + r0 * C, n, u.data());
    kernels::geglu(u.data(), n, inner, g.data(), numerics.geglu_gelu());
    ff_out_.forward(g.data(), n, y.data() + r0 * C, x.data() + r0 * C);
  }
  return y;
}

Transformer2D Transformer2D::load(WeightSource& w, const std::string& p, int64_t C, int64_t context_dim,
                                  int64_t heads, int depth, int64_t groups, bool linear_projection,
                                  kernels::Precision precision) {
  Transformer2D t;
  t.norm_ = GroupNorm::load(w, p + ".norm", C, groups, 1e-6f);  // eps chosen per call
  t.proj_in_ = Linear::load(w, p + ".proj_in", C, C, true, precision, /*from_conv1x1=*/!linear_projection);
  for (int d = 0; d < depth; ++d)
    t.blocks_.push_back(BasicTransformerBlock::load(w, p + ".transformer_blocks." + std::to_string(d), C,
                                                    context_dim, heads, precision));
  t.proj_out_ = Linear::load(w, p + ".proj_out", C, C, true, precision, /*from_conv1x1=*/!linear_projection);
  return t;
}

Tensor Transformer2D::text_free_part(const Tensor& x, const Numerics& numerics) const {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  // NHWC flattened over (H, W) row-major is exactly the token order diffusers uses.
  Tensor h = proj_in_(norm_.with_eps(numerics.transformer_norm_eps())(x, /*silu=*/false)).reshaped({N, H * W, C});
  return blocks_.empty() ? h : blocks_.front().self_attention(h);
}

Tensor Transformer2D::after_text_free_part(const Tensor& x, const Tensor& tokens, const Tensor& context,
                                           const Numerics& numerics) const {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  Tensor h = tokens;
  for (size_t i = 0; i < blocks_.size(); ++i)
    h = i == 0 ? blocks_[0].after_self_attention(h, context, numerics) : blocks_[i](h, context, numerics);
  return proj_out_(h.reshaped({N, H, W, C}), &x);
}

VaeAttention VaeAttention::load(WeightSource& w, const std::string& p, int64_t C, int64_t groups,
                                kernels::Precision precision) {
  VaeAttention a;
  a.norm_ = GroupNorm::load(w, p + ".group_norm", C, groups, 1e-6f);
  AttentionNames names{p + ".to_q", p + ".to_k", p + ".to_v", p + ".to_out.0"};
  if (!w.has(p + ".to_q.weight") && w.has(p + ".query.weight"))
    names = {p + ".query", p + ".key", p + ".value", p + ".proj_attn"};
  a.attention_ =
      MultiHeadAttention::load(w, names, C, C, /*heads=*/1, /*qkv_bias=*/true, /*self=*/true, precision);
  return a;
}

Tensor VaeAttention::operator()(const Tensor& x) const {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  Tensor h = norm_(x, /*silu=*/false).reshaped({N, H * W, C});
  Tensor r = x.reshaped({N, H * W, C});
  return attention_(h, nullptr, &r).reshaped({N, H, W, C});
}

Conv2d load_downsample(WeightSource& w, const std::string& p, int64_t C, int padding,
                       kernels::Precision precision) {
  kernels::Conv2dGeometry g;
  g.stride = 2;
  if (padding == 0) {
    g.pad_bottom = g.pad_right = 1;  // diffusers pads (0, 1, 0, 1) then convolves unpadded
  } else {
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = padding;
  }
  return Conv2d::load(w, p + ".conv", C, C, 3, g, precision);
}

Upsample2D Upsample2D::load(WeightSource& w, const std::string& p, int64_t C, kernels::Precision precision) {
  Upsample2D u;
  u.conv_ = Conv2d::load_after_upsample(w, p + ".conv", C, C, precision);
  return u;
}

Tensor Upsample2D::operator()(const Tensor& x) const {
  return conv_.upsampled(x);
}

Tensor concat_channels(const Tensor& a, const Tensor& b) {
  if (a.rank() != 4 || b.rank() != 4 || a.dim(0) != b.dim(0) || a.dim(1) != b.dim(1) || a.dim(2) != b.dim(2))
    fail("internal: cannot concatenate ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  Tensor y = Tensor::empty({a.dim(0), a.dim(1), a.dim(2), a.dim(3) + b.dim(3)});
  kernels::concat_channels_nhwc(a.data(), a.dim(3), b.data(), b.dim(3), a.dim(0) * a.dim(1) * a.dim(2), y.data());
  return y;
}

}  // namespace octodiff
