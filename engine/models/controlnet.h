// ControlNetModel — diffusers' ControlNet (models/controlnet.py, controlnet_flax.py; spec
// flax-family.md §1): a trainable copy of the UNet's encoder half that reads a control image.
//
//   temb = time_embedding(sinusoid(t))                     (as the UNet's)
//          [+ add_embedding(text_embeds ‖ sinusoid(time_ids))] (SDXL ControlNets: "text_time", the
//                                                             same conditioning the SDXL UNet takes)
//   x = conv_in(sample) + cond_embedding(control image)    (image in [0, 1], RGB; "bgr" models flip it)
//   cond_embedding: conv_in (3→c0), SiLU, per level [3×3 conv, SiLU, stride-2 3×3 conv, SiLU],
//                   conv_out (→ block_out_channels[0]); the image is 2^(levels−1) times the latents
//   down blocks and mid block as the UNet's; every skip tensor of the down path (conv_in's
//   output, each resnet/transformer output, each downsampler output: 12 for SD 1.5) goes through
//   its 1×1 `controlnet_down_blocks.K`, the mid block's output through `controlnet_mid_block`;
//   each result × conditioning_scale → UNetResiduals (added to the UNet's skips and mid output).
//
// guess mode and global_pool_conditions (diffusers' "shuffle" ControlNets) are not implemented:
// a config asking for global_pool_conditions is refused.
#pragma once

#include <string>
#include <vector>

#include "models/configs.h"
#include "models/numerics.h"
#include "models/unet_2d_condition.h"
#include "models/unet_blocks.h"
#include "models/unet_encoder.h"

namespace octodiff {

struct ControlNetConfig {
  // The UNet-shaped part: in_channels, down_block_types, block_out_channels, layers_per_block,
  // heads, cross_attention_dim, … (up_block_types mirror the down blocks; unused).
  UNetConfig unet;
  int conditioning_channels = 3;
  std::vector<int> conditioning_embedding_out_channels = {16, 32, 96, 256};
  bool bgr = false;  // controlnet_conditioning_channel_order "bgr"

  // A diffusers ControlNetModel config.json (class defaults as ControlNetModel's). Settings this
  // engine does not implement are refused naming them, as UNetConfig::from_json does.
  static ControlNetConfig from_json(const std::string& text, const std::string& what);
  // Skip tensors of the down path = residuals the UNet takes: 1 + levels·layers + (levels − 1).
  int num_down_residuals() const;
  // Control image pixels per latent pixel: 2^(conditioning levels − 1) (8 for SD).
  int image_scale() const { return 1 << (static_cast<int>(conditioning_embedding_out_channels.size()) - 1); }
  // Empty when this ControlNet can drive `unet` (same addition embedding, cross_attention_dim,
  // in_channels, levels, channels, layers per block, block types), else every difference, "; "
  // separated, the model family's first (an SD 1.x ControlNet on SDXL names the missing
  // text_time embedding and the cross-attention width), for an error message.
  std::string mismatch_with(const UNetConfig& unet) const;
};

class ControlNetModel {
 public:
  // Weights under diffusers' names (controlnet_cond_embedding.*, controlnet_down_blocks.K, …),
  // packed in `precision` like the UNet's; every tensor must be taken (WeightSource::finish).
  static ControlNetModel load(WeightSource& w, const ControlNetConfig& config,
                              kernels::Precision precision = kernels::Precision::F32);

  // sample: N × h × w × C latents (the UNet's input); timesteps: N; context: N × L × cross_dim;
  // cond: N × H × W × conditioning_channels, values in [0, 1], RGB (H = image_scale()·h).
  // text_time: SDXL's pooled text embeddings and time ids (as the UNet's), required exactly when
  // config().unet.text_time(). Returns the residuals × conditioning_scale, NHWC.
  UNetResiduals forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                             const Tensor& cond, double conditioning_scale, const Numerics& numerics,
                             const UNetTextTime* text_time = nullptr) const;
  // The two parts of forward_nhwc. The conditioning embedding (N × H × W × C → N × h × w × C0,
  // C0 = block_out_channels[0]) depends on the control image only: a pipeline computes it once
  // per run and gives it to every step.
  Tensor embed_condition(const Tensor& cond) const;
  UNetResiduals forward_embedded_nhwc(const Tensor& sample, const std::vector<double>& timesteps,
                                      const Tensor& context, const Tensor& embedded_cond, double conditioning_scale,
                                      const Numerics& numerics, const UNetTextTime* text_time = nullptr) const;
  // The same on NCHW tensors (diffusers' layout; residuals NCHW too), for tests.
  UNetResiduals forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                        const Tensor& cond, double conditioning_scale, const Numerics& numerics,
                        const UNetTextTime* text_time = nullptr) const;

  const ControlNetConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

 private:
  // time_embedding(sinusoid(t)) [+ add_embedding(text_time)], SiLU applied (every resnet's first step).
  Tensor time_embedding(const std::vector<double>& timesteps, const UNetTextTime* text_time) const;
  Tensor down_path(const Tensor& sample, const Tensor& embedded, const std::vector<double>& timesteps,
                   const Tensor& temb, const Tensor& context, const Numerics& numerics, std::vector<Tensor>& skips) const;
  void check_inputs(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                    const Tensor& cond) const;

  ControlNetConfig config_;
  kernels::Precision precision_ = kernels::Precision::F32;
  Linear time_linear_1_, time_linear_2_;
  TextTimeEmbedding add_embedding_;  // SDXL ControlNets (text_time) only
  Conv2d conv_in_;
  Conv2d cond_in_, cond_out_;
  std::vector<Conv2d> cond_blocks_;  // 3×3 conv, stride-2 3×3 conv, per conditioning level
  UNetEncoder encoder_;              // down blocks and mid block, as the UNet's
  std::vector<Linear> zero_convs_;  // controlnet_down_blocks.K (1×1)
  Linear mid_zero_conv_;            // controlnet_mid_block (1×1)
};

}  // namespace octodiff
