// Stage 4: final latents → images.
#pragma once

#include "core/tensor.h"
#include "models/autoencoder_kl.h"
#include "models/autoencoder_tiny.h"
#include "pipeline/generation.h"
#include "pipeline/tiled_decode.h"

namespace octodiff {

// Latents (B, h, w, C) as sampling left them → images (B, H, W, 3) in [0, 1]: the latents are
// divided by the VAE's scaling factor as the `compat` mode's pipeline forms it (Flax: times
// (1/sf) formed in double; torch: divided by sf in float32), decoded (in tiles when `tiles` is
// given: pipeline/tiled_decode.h), then (x/2 + 0.5) clamped.
Tensor decode_with_vae(const AutoencoderKL& vae, const Tensor& latents, Compat compat,
                       const VaeTiling* tiles = nullptr);

// The same with a tiny autoencoder (TAESD), which takes the latents as sampling left them
// (its scaling factor is 1), in both compat modes, as diffusers' pipelines with `vae=AutoencoderTiny`.
Tensor decode_with_tiny_autoencoder(const AutoencoderTiny& tiny, const Tensor& latents);

}  // namespace octodiff
