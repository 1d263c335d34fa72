// UNet2DConditionModel — the denoiser of Stable Diffusion 1.x/2.x (spec/models.md §2):
//
//   temb = time_embedding(sinusoid(t) [+ cond_proj(timestep_cond)])
//          [+ add_embedding(text_embeds ‖ sinusoid(time_ids))  (SDXL's "text_time")];  x = conv_in(sample)
//   down blocks: resnets (+ transformers on the text), downsample; every output kept as a skip
//   mid block:   resnet, transformer, resnet
//   up blocks:   concat [x, skip] → resnet (+ transformer), …, upsample
//   out = conv_out(SiLU(GroupNorm(x)))
#pragma once

#include <optional>
#include <vector>

#include "models/configs.h"
#include "models/numerics.h"
#include "models/text_time_embedding.h"
#include "models/unet_blocks.h"
#include "models/unet_encoder.h"

namespace octodiff {

// Intermediate tensors for tests and debugging (NCHW like diffusers' outputs).
struct UNetDebug {
  Tensor time_proj;       // N × C0 (the sinusoidal embedding)
  Tensor time_embedding;  // N × 4·C0 (before the text_time embedding is added)
  Tensor add_embedding;   // N × 4·C0: SDXL's add_embedding output (text_time UNets only)
  Tensor mid_block_out;   // N × C × h × w
  // Samples the layers before the first cross-attention ran on: fewer than N when the batch
  // repeats a sample at the same timestep (classifier-free guidance), whose copies share them.
  int64_t text_free_samples = 0;
};

// diffusers' down_block_additional_residuals / mid_block_additional_residual (a ControlNet's
// output, models/controlnet.h), NHWC: added to the UNet's skip tensors after the down blocks
// (one per skip, in order) and to the mid block's output.
struct UNetResiduals {
  std::vector<Tensor> down;  // N × h_k × w_k × C_k, one per skip tensor (12 for SD 1.5)
  Tensor mid;                // N × h × w × C_mid
};

class UNet2DCondition {
 public:
  // `precision`: the products of every convolution, projection and attention (layers.h); the
  // weights are packed in it.
  static UNet2DCondition load(WeightSource& w, const UNetConfig& config,
                              kernels::Precision precision = kernels::Precision::F32);

  // sample: N × C × h × w (NCHW, as diffusers); timesteps: N values (fractional allowed);
  // context: N × L × cross_attention_dim. Returns the predicted noise, N × C_out × h × w.
  // For UNets without time_cond_proj_dim (an LCM-distilled UNet refuses this form).
  Tensor forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                 const Numerics& numerics, UNetDebug* debug = nullptr) const;
  // The same on NHWC tensors (what the pipeline keeps between steps).
  Tensor forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                      const Numerics& numerics, UNetDebug* debug = nullptr) const;

  // With a per-sample condition of the time embedding, diffusers' `timestep_cond`:
  // timestep_cond is N × time_cond_proj_dim float32 (for LCM-distilled UNets the guidance
  // embedding, lcm_guidance_embedding below), added through time_embedding.cond_proj to the
  // sinusoidal projection before linear_1. Required exactly when config().time_cond_proj_dim > 0:
  // a null timestep_cond for such a UNet, or a non-null one for a UNet without cond_proj, is an
  // error (diffusers would silently drop the condition in the first case).
  // `residuals` (optional): a ControlNet's, whose shapes must be the skips' and the mid block's.
  // `text_time`: required exactly when config().text_time() (SDXL), refused otherwise.
  Tensor forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                 const Tensor* timestep_cond, const Numerics& numerics, UNetDebug* debug = nullptr,
                 const UNetResiduals* residuals = nullptr, const UNetTextTime* text_time = nullptr) const;
  Tensor forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                      const Tensor* timestep_cond, const Numerics& numerics, UNetDebug* debug = nullptr,
                      const UNetResiduals* residuals = nullptr, const UNetTextTime* text_time = nullptr) const;

  const UNetConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

  // The sinusoidal timestep embedding, computed in float32 exactly as diffusers does.
  static Tensor timestep_embedding(const std::vector<double>& timesteps, int64_t dim, bool flip_sin_to_cos,
                                   double freq_shift);
  // time_embedding(sinusoid(t) [+ cond_proj(timestep_cond)]) before the resnets' SiLU: N × 4·C0.
  Tensor time_embedding(const Tensor& t_proj, const Tensor* timestep_cond) const;
  // SDXL: add_embedding(text_embeds ‖ sinusoid(time_ids) per id) — N × 4·C0, what diffusers adds
  // to the time embedding as aug_emb.
  Tensor text_time_embedding(const UNetTextTime& text_time, int64_t N) const;

 private:
  void check_timestep_cond(const Tensor* timestep_cond, int64_t N) const;
  struct UpLevel {  // one up block
    std::vector<ResnetBlock2D> resnets;
    std::vector<Transformer2D> attentions;  // empty for UpBlock2D
    std::optional<Upsample2D> upsample;
  };
  UNetConfig config_;
  kernels::Precision precision_ = kernels::Precision::F32;
  Linear time_cond_proj_;  // in = time_cond_proj_dim, out = C0, no bias; unset when the dim is 0
  Linear time_linear_1_, time_linear_2_;
  TextTimeEmbedding add_embedding_;  // SDXL's add_embedding; unset without text_time
  Conv2d conv_in_, conv_out_;
  UNetEncoder encoder_;  // down blocks and mid block (shared with ControlNetModel)
  std::vector<UpLevel> up_;
  GroupNorm norm_out_;
};

// The guidance embedding an LCM-distilled UNet takes as `timestep_cond`, exactly as diffusers'
// LatentConsistencyModelPipeline.get_guidance_scale_embedding computes it, in float32 step by step:
// w = float32(guidance_scale − 1) (the Imagen/diffusers guidance convention), w·1000, then with
// half = dim / 2: f_k = exp(k · −(ln 10000 / (half − 1))), row = [sin(w·1000·f_k) | cos(…)] over
// k < half, and a zero in the last column when dim is odd. One row per guidance scale given
// (N × dim float32); dim is the UNet's config().time_cond_proj_dim (256 for LCM SD 1.5); dim must
// be ≥ 4 (diffusers divides by half − 1).
Tensor lcm_guidance_embedding(const std::vector<double>& guidance_scales, int64_t dim);

}  // namespace octodiff
