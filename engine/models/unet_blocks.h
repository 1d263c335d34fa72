// The blocks of diffusers' UNet2DConditionModel and AutoencoderKL (spec/models.md §2.4, §2.5, §3):
// ResnetBlock2D, Transformer2DModel with its BasicTransformerBlocks, Downsample2D, Upsample2D.
// All work on NHWC activations (N × H × W × C). Every load takes the precision of the block's
// products (layers.h); norms and activations are float32 either way.
#pragma once

#include <string>
#include <vector>

#include "models/attention.h"
#include "models/layers.h"
#include "models/numerics.h"

namespace octodiff {

// norm1 → SiLU → conv1 (+ time embedding) → norm2 → SiLU → conv2, plus the (1×1-projected)
// input. The VAE's variant has no time embedding and eps 1e-6.
class ResnetBlock2D {
 public:
  // temb_channels = 0 for the VAE (no time embedding projection).
  static ResnetBlock2D load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out,
                            int64_t temb_channels, int64_t groups, float eps, kernels::Precision precision);
  // temb_silu: N × temb_channels, already passed through SiLU (shared by every resnet).
  Tensor operator()(const Tensor& x, const Tensor* temb_silu) const;
  int64_t out_channels() const { return out_; }
  // Its parts, for running the block in pieces (models/tiled_layers.h, VAE resnets only):
  // conv2(SiLU(norm2(conv1(SiLU(norm1(x)))))) + (shortcut ? shortcut(x) : x).
  const GroupNorm& norm1() const { return norm1_; }
  const GroupNorm& norm2() const { return norm2_; }
  const Conv2d& conv1() const { return conv1_; }
  const Conv2d& conv2() const { return conv2_; }
  const Linear* shortcut() const { return has_shortcut_ ? &shortcut_ : nullptr; }
  bool has_time_embedding() const { return has_temb_; }

 private:
  int64_t in_ = 0, out_ = 0;
  GroupNorm norm1_, norm2_;
  Conv2d conv1_, conv2_;
  bool has_temb_ = false, has_shortcut_ = false;
  Linear time_emb_proj_;
  Linear shortcut_;  // 1×1 conv as a channel GEMM
};

// LayerNorm → self-attention, LayerNorm → cross-attention on the text, LayerNorm → GEGLU MLP,
// each with a residual.
class BasicTransformerBlock {
 public:
  static BasicTransformerBlock load(WeightSource& w, const std::string& prefix, int64_t channels,
                                    int64_t context_dim, int64_t heads, kernels::Precision precision);
  Tensor operator()(const Tensor& x, const Tensor& context, const Numerics& numerics) const {
    return after_self_attention(self_attention(x), context, numerics);
  }
  // The same in two parts: the first does not see the text (UNet2DCondition runs it once for
  // samples a batch repeats).
  Tensor self_attention(const Tensor& x) const;
  Tensor after_self_attention(const Tensor& x, const Tensor& context, const Numerics& numerics) const;

 private:
  LayerNorm norm1_, norm2_, norm3_;
  MultiHeadAttention attn1_, attn2_;
  Linear ff_in_, ff_out_;  // C -> 8C (GEGLU halves), 4C -> C
};

// GroupNorm → proj_in → transformer blocks → proj_out, plus the input. proj_in/out are 1×1 convs
// (SD 1.x) or Linear layers (SD 2.x, use_linear_projection) — the same GEMM on NHWC data.
// The numerics flavour is a per-call argument: the same loaded weights serve both flavours.
class Transformer2D {
 public:
  static Transformer2D load(WeightSource& w, const std::string& prefix, int64_t channels, int64_t context_dim,
                            int64_t heads, int depth, int64_t groups, bool linear_projection,
                            kernels::Precision precision);
  Tensor operator()(const Tensor& x, const Tensor& context, const Numerics& numerics) const {
    return after_text_free_part(x, text_free_part(x, numerics), context, numerics);
  }
  // The same in two parts. The first — norm, proj_in and the first block's self-attention — does
  // not see the text: N × L × C tokens, which the second takes with the block's input x.
  Tensor text_free_part(const Tensor& x, const Numerics& numerics) const;
  Tensor after_text_free_part(const Tensor& x, const Tensor& tokens, const Tensor& context,
                              const Numerics& numerics) const;

 private:
  GroupNorm norm_;
  Linear proj_in_, proj_out_;
  std::vector<BasicTransformerBlock> blocks_;
};

// The VAE mid-block attention: GroupNorm → single-head self-attention (with biases) + input.
// Accepts both key namings (to_q/to_k/to_v/to_out.0 and the older query/key/value/proj_attn).
class VaeAttention {
 public:
  static VaeAttention load(WeightSource& w, const std::string& prefix, int64_t channels, int64_t groups,
                           kernels::Precision precision);
  Tensor operator()(const Tensor& x) const;

 private:
  GroupNorm norm_;
  MultiHeadAttention attention_;
};

// 3×3 convolution with stride 2. UNet: padding 1 on every side. VAE (padding 0 in the config):
// zero rows/columns added at the bottom/right only, as diffusers does.
Conv2d load_downsample(WeightSource& w, const std::string& prefix, int64_t channels, int padding,
                       kernels::Precision precision);

// Nearest 2× upsampling followed by a 3×3 convolution (Conv2d::upsampled: computed on the image
// before upsampling where the loader allows large Winograd weights — the VAE).
class Upsample2D {
 public:
  static Upsample2D load(WeightSource& w, const std::string& prefix, int64_t channels,
                         kernels::Precision precision);
  Tensor operator()(const Tensor& x) const;
  const Conv2d& conv() const { return conv_; }

 private:
  Conv2d conv_;
};

// [a, b] along channels (NHWC).
Tensor concat_channels(const Tensor& a, const Tensor& b);

}  // namespace octodiff
