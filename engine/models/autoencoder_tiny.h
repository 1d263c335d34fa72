// AutoencoderTiny — TAESD, the tiny distilled autoencoder (madebyollin), as diffusers 0.31
// computes it (autoencoder_tiny.py; EncoderTiny/DecoderTiny in vae.py; spec/fast-sampling.md §3).
// Only 3×3 convolutions, ReLU, nearest 2× upsampling and one tanh; no norms, no attention.
// ~1.2 M parameters per half; a 512×512 decode costs ~1/18 of the SD VAE's.
//
// Each half is diffusers' nn.Sequential `layers`, kept here as the same list, so layer i is named
// `{encoder,decoder}.layers.{i}.…` in the weights (C = channels, L = latent channels):
//
//   decoder: 3·tanh(x/3) → conv(L→C) → ReLU →
//            per stage s: num_decoder_blocks[s] × Block, then (not the last stage) nearest 2× and
//            conv(C→C, no bias); the last stage ends with conv(C→out_channels) instead
//            → 2x − 1
//   encoder: (x + 1)/2 → conv(in_channels→C) → num_encoder_blocks[0] × Block →
//            per later stage: conv(C→C, stride 2, padding 1, no bias), num_encoder_blocks[s] × Block
//            → conv(C→L)
//   Block:   ReLU(conv.4(ReLU(conv.2(ReLU(conv.0(x))))) + x)      (all 3×3, with bias)
//
// Calling it from a pipeline (diffusers' StableDiffusionPipeline / LCM / img2img with
// vae=AutoencoderTiny):
//   - decode: diffusers passes `latents / scaling_factor` to decode; scaling_factor is 1.0 for
//     every TAESD, so pass the UNet's final latents AS THEY ARE (not divided by the SD VAE's
//     0.18215): `image = taesd.decode_nhwc(latents)`. It returns N × 8h × 8w × 3 in [0, 1]: the
//     pipeline's output_type="np" numbers, `(decode(z).sample / 2 + 0.5).clamp(0, 1)` in NHWC,
//     computed in that order in float32. (Equivalently: decode_raw_nhwc, then the pipeline's own
//     `clamp(v / 2 + 0.5, 0, 1)` loop, exactly as it post-processes AutoencoderKL's output; and
//     dividing by config().scaling_factor = 1.0 first changes nothing.)
//   - encode (img2img): `latents = taesd.encode_nhwc(image) * scaling_factor` with the image
//     in [-1, 1] (what image_processor.preprocess makes, NHWC); encode_nhwc returns
//     AutoencoderTiny.encode(image).latents (a plain tensor: no distribution, nothing to sample).
//   - latent_magnitude / latent_shift are not used by either direction (only by diffusers'
//     AutoencoderTiny.forward, which stores latents as 8-bit images).
// Image sizes: decode gives 8× the latent size (decoder_scale_factor()); encode accepts any size
// and gives ceil(H/8) × ceil(W/8) (each stride-2 convolution rounds up), as diffusers does.
#pragma once

#include <vector>

#include "models/configs.h"
#include "models/layers.h"

namespace octodiff {

class AutoencoderTiny {
 public:
  // Weights under diffusers' names (`decoder.layers.…`, `encoder.layers.…`) in one source: the
  // decoder always, the encoder when the source has `encoder.layers.0.weight`. Calls w.finish(),
  // so a tensor the config does not explain is an error. `precision` as for every model (layers.h):
  // BF16 packs the convolution weights as bfloat16 and computes their products in bf16.
  static AutoencoderTiny load(WeightSource& w, const AutoencoderTinyConfig& config,
                              kernels::Precision precision = kernels::Precision::F32);
  // The same with the halves in separate sources (madebyollin's two files, renamed to diffusers'
  // names); `encoder` may be null. Calls finish() on both.
  static AutoencoderTiny load(WeightSource& decoder, WeightSource* encoder, const AutoencoderTinyConfig& config,
                              kernels::Precision precision = kernels::Precision::F32);

  // latents: N × h × w × latent_channels, unscaled (see above) → N × H × W × out_channels in
  // [0, 1], H = h · decoder_scale_factor(): the pipeline's final image.
  Tensor decode_nhwc(const Tensor& latents) const;
  // The same before the pipeline's post-processing: AutoencoderTiny.decode(latents).sample
  // (NHWC), ≈ [-1, 1], not clamped.
  Tensor decode_raw_nhwc(const Tensor& latents) const;
  // images: N × H × W × in_channels in [-1, 1] → N × ceil(H/8) × ceil(W/8) × latent_channels:
  // AutoencoderTiny.encode(images).latents (NHWC), before the pipeline's × scaling_factor.
  Tensor encode_nhwc(const Tensor& images) const;
  bool has_encoder() const { return !encoder_.empty(); }

  const AutoencoderTinyConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

 private:
  // AutoencoderTinyBlock: conv.0 → ReLU → conv.2 → ReLU → conv.4, plus the input, → ReLU.
  // (diffusers' 1×1 `skip` exists only when in ≠ out, which the config never allows.)
  struct Block {
    Conv2d conv0, conv2, conv4;
    Tensor operator()(const Tensor& x) const;
  };
  // One entry of the nn.Sequential.
  struct Layer {
    // Upsample2x holds nothing: the Conv after it applies it (Conv2d::upsampled, run()).
    enum class Kind { Conv, Relu, Block, Upsample2x } kind = Kind::Relu;
    Conv2d conv;  // Kind::Conv
    Block block;  // Kind::Block
  };
  static Layer load_block(WeightSource& w, const std::string& name, int64_t C, kernels::Precision p);
  static std::vector<Layer> load_decoder(WeightSource& w, const AutoencoderTinyConfig& c, kernels::Precision p);
  static std::vector<Layer> load_encoder(WeightSource& w, const AutoencoderTinyConfig& c, kernels::Precision p);
  static Tensor run(const std::vector<Layer>& layers, Tensor x);

  AutoencoderTinyConfig config_;
  kernels::Precision precision_ = kernels::Precision::F32;
  std::vector<Layer> decoder_, encoder_;
};

}  // namespace octodiff
