// Analytic FLOP counts (multiply-add = 2 FLOPs) of the networks, from their configs: the work
// of every convolution, projection and attention product. Norms, activations and other
// element-wise work are not counted. SD 1.5 at 64×64 latents: UNet 803.3 GFLOP per image,
// VAE decoder 2514.5 GFLOP at 512×512 (the figures benchmarks divide by). SDXL base's UNet:
// 6761.2 GFLOP per image at 1024×1024 (128×128 latents), 1588.8 at 512×512.
#pragma once

#include <cstdint>
#include <vector>

#include "models/configs.h"

namespace octodiff {

// One UNet evaluation of `batch` latents of h × w with a text context of `context_len` tokens.
double unet_flops(const UNetConfig& c, int64_t batch, int64_t h, int64_t w, int64_t context_len = 77);
// The part of unet_flops that a sample repeated within a batch shares with its first copy (the
// layers before the first cross-attention, UNet2DCondition::forward_nhwc): per repeated sample.
double unet_text_free_flops(const UNetConfig& c, int64_t h, int64_t w);
// A ControlNet (models/controlnet.h) for latents of h × w, `batch` samples: its time (and SDXL
// text_time) embedding, conv_in, down blocks and mid block as unet_flops counts them for the
// UNet of config `c`, the conditioning embedding of the control image (conditioning_channels →
// embedding_channels[0] … at 2^(entries − 1) × the latent size, stride-2 steps down to it, then
// to block_out_channels[0]) and the 1×1 zero convolutions (ControlNetConfig's fields).
double controlnet_flops(const UNetConfig& c, const std::vector<int>& embedding_channels, int conditioning_channels,
                        int64_t batch, int64_t h, int64_t w, int64_t context_len = 77);
// Decoding `batch` latents of h × w (post_quant_conv included).
double vae_decode_flops(const VaeConfig& c, int64_t batch, int64_t h, int64_t w);
// The tiny autoencoder (TAESD): decoding `batch` latents of h × w, and encoding `batch` images of
// H × W (stride-2 convolutions round up). Full-size TAESD at 512×512: decode 141.4 GFLOP
// (70.7 GMAC), encode 122.3 GFLOP.
double taesd_decode_flops(const AutoencoderTinyConfig& c, int64_t batch, int64_t h, int64_t w);
double taesd_encode_flops(const AutoencoderTinyConfig& c, int64_t batch, int64_t H, int64_t W);
// Encoding `batch` sequences of `length` tokens.
double clip_text_flops(const ClipTextConfig& c, int64_t batch, int64_t length);

}  // namespace octodiff
