// Tiled VAE decoding: the decoder's up blocks run one layer at a time over the whole image, each
// layer computed in square tiles (AutoencoderKL::decode_up_in_tiles_nhwc, models/tiled_layers.h),
// so that a layer's temporaries are one tile's and only the activations between layers are whole.
//
//   z (N, h, w, latent) ─ post_quant_conv, conv_in, mid block on the whole latents (global
//   attention; 1/64 of the pixels) ─ per layer of the up blocks and conv_out: its GroupNorm's
//   statistics summed (in double) over the whole input, then tile by tile, each convolution
//   reading its input with the 1-pixel halo it needs ─ N × H × W × 3.
//
// Every output pixel is the whole decode's to float32 rounding (measured: tiled_decode_test), so
// tiles need no overlap and no blending and leave no seam; VaeTiling::overlap is accepted for
// older settings and ignored. Tiles are `tile` × `tile` pixels of the layer they run in (the
// setting's latent pixels: 64, i.e. `--vae-tile 512`, gives every layer 64-pixel tiles).
// Cost: a 3×3 convolution's tile also computes its halo ((t+2)²/t², +6 % at 64), plus the
// copies and one statistics pass per GroupNorm. Memory: the activations between layers are at
// most the input and inner activation of the widest full-resolution resnet (SD: 256 + 128
// channels, 1.5 kB per image pixel, against ~2.5 kB of a whole decode); they live in file-backed
// scratch mappings of which a layer keeps only a band of tile rows in the process's memory, the
// rest in the page cache (reclaimable: written to the disk under memory pressure).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "core/tensor.h"
#include "models/autoencoder_kl.h"
#include "pipeline/vae_tiling.h"

namespace octodiff {

// Whether a decode of `batch` images of h × w latents (scale: image pixels per latent pixel) runs in
// tiles; `memory_bytes`: the physical memory Auto weighs the decode against (0: this machine's).
bool vae_decode_uses_tiles(const VaeTiling& tiling, int64_t latent_height, int64_t latent_width, int scale,
                           int64_t batch = 1, double memory_bytes = 0);

// Where tiled decodes keep the activations between layers: <cache dir>/vae-scratch (model_hash.h).
std::filesystem::path vae_scratch_dir();

// z: N × h × w × latent, already divided by the scaling factor → N × H × W × 3 (not clamped),
// as AutoencoderKL::decode_nhwc. Checks `tiling` first. The activations between layers live in
// unlinked files in `scratch_dir` (models/tiled_layers.h: ActivationScratch), each layer holding a
// band of tile rows of them in memory at a time; on the heap without a folder (or where the
// folder cannot hold them).
Tensor tiled_decode_nhwc(const AutoencoderKL& vae, const Tensor& z, const VaeTiling& tiling,
                         const std::optional<std::filesystem::path>& scratch_dir = vae_scratch_dir());

}  // namespace octodiff
