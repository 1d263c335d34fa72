// AutoencoderKL — Stable Diffusion's VAE (spec/models.md §3). The decoder turns latents into
// images; the encoder (for img2img and tests) turns images into the latent distribution.
//
//   decode: post_quant_conv → conv_in → mid (resnet, attention, resnet)
//           → up blocks (resnets, nearest 2× + conv) → SiLU(GroupNorm) → conv_out
//   encode: conv_in → down blocks (resnets, bottom/right-padded stride-2 conv)
//           → mid → SiLU(GroupNorm) → conv_out → quant_conv = [mean | logvar]
#pragma once

#include <optional>
#include <vector>

#include "models/configs.h"
#include "models/unet_blocks.h"

namespace octodiff {

class ActivationScratch;  // models/tiled_layers.h

class AutoencoderKL {
 public:
  // Loads the decoder (always) and the encoder (when `with_encoder` and present in the file);
  // calls w.finish() — encoder tensors are accepted and ignored when not loaded.
  // `precision`: of every convolution and attention product (layers.h), weights packed in it.
  static AutoencoderKL load(WeightSource& w, const VaeConfig& config, bool with_encoder = true,
                            kernels::Precision precision = kernels::Precision::F32);

  // z: N × latent × h × w (already divided by scaling_factor) → N × 3 × H × W, not clamped.
  Tensor decode(const Tensor& z) const;
  Tensor decode_nhwc(const Tensor& z) const;  // N × h × w × latent → N × H × W × 3
  // decode_nhwc in its two halves, decode_up_nhwc(decode_mid_nhwc(z)): post_quant_conv, conv_in
  // and the mid block at the latent size (N × h × w × latent → N × h × w × block_out_channels.back()),
  // then the up blocks and conv_out (→ N × H × W × 3), which tiled decoding runs tile by tile.
  Tensor decode_mid_nhwc(const Tensor& z) const;
  Tensor decode_up_nhwc(const Tensor& x) const;
  // decode_up_nhwc one layer at a time over the whole image, each layer computed in tiles of
  // `tile` × `tile` of its own pixels (models/tiled_layers.h): the same image to float32
  // rounding, with only the activations between layers at full size — in `scratch`'s
  // file-backed mappings when given, released band by band. `mid` is consumed (its storage is
  // reused): the caller must hold no other reference to it.
  Tensor decode_up_in_tiles_nhwc(Tensor mid, int64_t tile, const ActivationScratch* scratch = nullptr) const;

  // image: N × 3 × H × W in [-1, 1] → moments N × 2·latent × h × w ([mean | logvar], unclamped).
  Tensor encode_moments(const Tensor& image) const;
  bool has_encoder() const { return encoder_.has_value(); }

  const VaeConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

 private:
  struct Level {
    std::vector<ResnetBlock2D> resnets;
    std::optional<Conv2d> downsample;
    std::optional<Upsample2D> upsample;
  };
  struct Coder {  // the shared shape of encoder and decoder
    Conv2d conv_in, conv_out;
    ResnetBlock2D mid_resnet_0, mid_resnet_1;
    std::optional<VaeAttention> mid_attention;
    std::vector<Level> levels;
    GroupNorm norm_out;
  };
  static Coder load_mid(WeightSource& w, const std::string& prefix, const VaeConfig& c, Coder coder,
                        kernels::Precision precision);
  Tensor run_mid(const Coder& coder, Tensor x) const;

  VaeConfig config_;
  kernels::Precision precision_ = kernels::Precision::F32;
  Coder decoder_;
  std::optional<Coder> encoder_;
  std::optional<Linear> post_quant_conv_, quant_conv_;
};

}  // namespace octodiff
