// UNet2DConditionModel — the denoiser of Stable Diffusion 1.x/2.x (spec/models.md §2):
//
//   temb = time_embedding(sinusoid(t));  x = conv_in(sample)
//   down blocks: resnets (+ transformers on the text), downsample; every output kept as a skip
//   mid block:   resnet, transformer, resnet
//   up blocks:   concat [x, skip] → resnet (+ transformer), …, upsample
//   out = conv_out(SiLU(GroupNorm(x)))
#pragma once

#include <optional>
#include <vector>

#include "models/configs.h"
#include "models/numerics.h"
#include "models/unet_blocks.h"

namespace octodiff {

// Intermediate tensors for tests and debugging (NCHW like diffusers' outputs).
struct UNetDebug {
  Tensor time_proj;       // N × C0 (the sinusoidal embedding)
  Tensor time_embedding;  // N × 4·C0
  Tensor mid_block_out;   // N × C × h × w
  // Samples the layers before the first cross-attention ran on: fewer than N when the batch
  // repeats a sample at the same timestep (classifier-free guidance), whose copies share them.
  int64_t text_free_samples = 0;
};

class UNet2DCondition {
 public:
  // `precision`: the products of every convolution, projection and attention (layers.h); the
  // weights are packed in it.
  static UNet2DCondition load(WeightSource& w, const UNetConfig& config,
                              kernels::Precision precision = kernels::Precision::F32);

  // sample: N × C × h × w (NCHW, as diffusers); timesteps: N values (fractional allowed);
  // context: N × L × cross_attention_dim. Returns the predicted noise, N × C_out × h × w.
  Tensor forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                 const Numerics& numerics, UNetDebug* debug = nullptr) const;
  // The same on NHWC tensors (what the pipeline keeps between steps).
  Tensor forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                      const Numerics& numerics, UNetDebug* debug = nullptr) const;

  const UNetConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

  // The sinusoidal timestep embedding, computed in float32 exactly as diffusers does.
  static Tensor timestep_embedding(const std::vector<double>& timesteps, int64_t dim, bool flip_sin_to_cos,
                                   double freq_shift);

 private:
  struct Level {  // one down or up block
    std::vector<ResnetBlock2D> resnets;
    std::vector<Transformer2D> attentions;  // empty for DownBlock2D / UpBlock2D
    std::optional<Conv2d> downsample;
    std::optional<Upsample2D> upsample;
  };
  UNetConfig config_;
  kernels::Precision precision_ = kernels::Precision::F32;
  Linear time_linear_1_, time_linear_2_;
  Conv2d conv_in_, conv_out_;
  std::vector<Level> down_, up_;
  ResnetBlock2D mid_resnet_0_, mid_resnet_1_;
  Transformer2D mid_attention_;
  GroupNorm norm_out_;
};

}  // namespace octodiff
