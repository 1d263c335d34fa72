// Loading a tiny autoencoder (TAESD, models/autoencoder_tiny.h) from the files people have:
//
//   (a) a diffusers folder: config.json (`_class_name` AutoencoderTiny) + diffusion_pytorch_model
//       .safetensors (or its fp16 variant / shards), e.g. madebyollin/taesd, taesdxl;
//   (b) madebyollin's single files, <name>_decoder.safetensors and (optional) <name>_encoder
//       .safetensors, keyed as taesd.py's nn.Sequential (`1.weight`, `3.conv.0.weight`, …): the
//       path of either file (its partner is looked for beside it) or a folder holding them (and no
//       config.json). Decoder key K+1 is diffusers' decoder.layers.K (taesd.py's Decoder starts with
//       a parameter-free Clamp); encoder keys are diffusers' encoder.layers.K unchanged. These
//       files carry no config: the channel and latent widths come from the tensor shapes and the
//       number of blocks per stage from the layer list; everything else is TAESD's default.
//
// The decoder is required; the encoder is loaded when present (has_encoder()). Every tensor must
// be one the model takes, with the shape the config implies: a missing, unknown or mis-shaped
// tensor, a truncated or malformed file, a .pth pickle or an unsupported config are errors naming
// the file (and the tensor). Weights are packed on the heap (no weight cache: a TAESD is ~10 MB).
//
// Usage (the pipeline's final decode with TAESD instead of the VAE; latents NOT divided by the
// SD VAE's 0.18215 — TAESD's scaling_factor is 1.0):
//   auto taesd = load_autoencoder_tiny("models/taesd", ComputeDType::F32);
//   Tensor image = taesd->decode_nhwc(latents_nhwc);   // N × 8h × 8w × 3, in [0, 1]
#pragma once

#include <filesystem>
#include <memory>

#include "models/autoencoder_tiny.h"
#include "pipeline/generation.h"

namespace octodiff {

std::shared_ptr<const AutoencoderTiny> load_autoencoder_tiny(const std::filesystem::path& path, ComputeDType dtype);

// The precision a model's tiny autoencoder computes in when the model is loaded for `requested`:
// float32 stays float32; bf16 only where the CPU multiplies bf16 faster than float32
// (`bf16_products_native`: VDPBF16PS at twice the FMA rate, kernels::kernel_bf16_dot()).
// Elsewhere — AVX2 CPUs, AVX-512 ones without BF16, Intel cores where VDPBF16PS issues at the FMA
// rate — bf16 products are float32 FMAs on widened values, and TAESD in float32 is both faster
// and exact: its 3×3 convolutions run as Winograd F(4×4) (36 products per 16 outputs, against
// bf16's F(2×2), 16 per 4: bf16-rounded F(4×4) tiles are too coarse), with no rounding and
// widening of activations, and its weights are ~10 MB either way. Measured on Emerald Rapids
// (bench/results, "TAESD in float32 where bf16 products are FMAs"): a 512×512 decode 1.3× faster.
ComputeDType tiny_autoencoder_dtype(ComputeDType requested, bool bf16_products_native);

}  // namespace octodiff
