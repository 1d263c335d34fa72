// The encoder half of diffusers' UNet2DConditionModel — its down blocks and mid block — which
// the UNet and a ControlNet (a trainable copy of that half) both run. conv_in and the time
// embedding stay with their owners (a ControlNet adds its image embedding after conv_in).
//
//   down: for each level i (block_out_channels[i]): layers_per_block × [ResnetBlock2D, then a
//         Transformer2D for CrossAttnDownBlock2D], then a stride-2 downsampler except on the last
//   mid:  ResnetBlock2D, Transformer2D, ResnetBlock2D at block_out_channels[-1]
//
// Every skip tensor of the down path (conv_in's output, each resnet/transformer output, each
// downsampler output: 12 for SD 1.5) is what the UNet's up path concatenates and what a
// ControlNet turns into residuals.
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"
#include "kernels/conv2d.h"
#include "models/configs.h"
#include "models/distinct_samples.h"
#include "models/numerics.h"
#include "models/unet_blocks.h"

namespace octodiff {

struct UNetDownLevel {
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2D> attentions;  // empty for DownBlock2D
  std::optional<Conv2d> downsample;       // absent on the last level
};

// The convolutions of a UNet or ControlNet with `c`'s channels that run as Winograd convolutions
// while the returned limit lives (the loaders hold it over their whole load; see the .cpp).
kernels::ScopedWinogradLimit unet_winograd_convolutions(const UNetConfig& c);

class UNetEncoder {
 public:
  // down_blocks.* and mid_block.* of a model with config `c`, packed in `precision`.
  static UNetEncoder load(WeightSource& w, const UNetConfig& c, kernels::Precision precision);

  // Up to the first cross-attention a UNet does not see the text: a guided batch's repeated
  // samples (DistinctSamples) may run those layers once when the first level has attention.
  bool can_share_text_free_part() const { return !levels_.empty() && !levels_[0].attentions.empty(); }

  // x (N × h × w × C0): conv_in's output — of the distinct rows only when `shared` is given, the
  // full batch otherwise. Runs the down blocks, appending every skip tensor (full batch) to
  // `skips`, and returns the last level's output (N × h' × w' × C_last).
  Tensor down(Tensor x, const Tensor& temb, const Tensor& context, const Numerics& numerics,
              const DistinctSamples* shared, std::vector<Tensor>& skips) const;
  // The mid block on the down path's output.
  Tensor mid(const Tensor& x, const Tensor& temb, const Tensor& context, const Numerics& numerics) const;

  const std::vector<UNetDownLevel>& levels() const { return levels_; }

 private:
  std::vector<UNetDownLevel> levels_;
  ResnetBlock2D mid_resnet_0_, mid_resnet_1_;
  Transformer2D mid_attention_;
};

}  // namespace octodiff
