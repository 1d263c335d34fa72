// Tiled VAE decoding: large latents decoded in overlapping square tiles, blended linearly across
// each overlap, so that the up blocks' activations (most of an untiled decode's memory, growing
// with the pixels) are those of one tile at a time.
//
//   z (N, h, w, latent) ─ post_quant_conv, conv_in, mid block on the whole latents (global
//   attention; 1/64 of the pixels) ─ tiles of ≤ `tile` latent pixels, neighbours sharing ≥
//   `overlap` ─ per tile: up blocks, conv_out ─ Σ weight · tile / Σ weight ─ N × H × W × 3.
//
// Each tile owns the part of the image up to the middle of its overlaps (the owned parts
// partition the image); its blend weight ramps linearly 0 → 1 across a band of overlap/4 latent
// pixels centred on that boundary, so that no tile's pixels within (overlap − band)/2 of its edge
// (changed by its zero padding) count, and two neighbours' weights sum to 1 across the band.
//
// GroupNorm needs the whole image's statistics, which no tile has (diffusers'
// AutoencoderKL.tiled_decode normalises each tile by itself, which shows as tile-sized shifts).
// Here a first pass over the tiles gathers every up-block GroupNorm's sums over the tiles' owned
// parts (normalising with each tile's own statistics meanwhile), and the pass that makes the image
// normalises every tile with those estimates of the whole image's statistics. The result is
// close to, not equal to, the untiled decode: on the tests' tiny random VAE, whose convolutions
// do not fade with distance as trained ones do, within 2–4e-2 with large overlaps (tiles of 60,
// overlap 30) and ~0.15 with small ones; one tile (the whole latents) is exact. Exact statistics
// would need a pass per GroupNorm (25 in SD's decoder) or every tile's activations kept at once
// (the untiled memory). Cost: the up blocks run twice over the tiles plus their overlaps.
//
// The tile grid along a side: n = ⌈(L − overlap)/(tile − overlap)⌉ tiles of one size
// ⌈(L − overlap)/n⌉ + overlap ≤ tile, spread evenly from 0 to L − size (sizes that do not divide
// decode too; overlaps are ≥ `overlap`). One tile (the side itself) when L ≤ tile.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/autoencoder_kl.h"
#include "pipeline/vae_tiling.h"

namespace octodiff {

// Whether a decode of `batch` images of h × w latents (scale: image pixels per latent pixel) runs in
// tiles; `memory_bytes`: the physical memory Auto weighs the decode against (0: this machine's).
bool vae_decode_uses_tiles(const VaeTiling& tiling, int64_t latent_height, int64_t latent_width, int scale,
                           int64_t batch = 1, double memory_bytes = 0);

// The tiles along a side of `length` latent pixels (the rule above).
struct VaeTileGrid {
  int64_t size = 0;             // every tile's side
  std::vector<int64_t> starts;  // ascending, the first 0, the last length − size
};
VaeTileGrid vae_tile_grid(int64_t length, int64_t max_tile, int64_t overlap);

// z: N × h × w × latent, already divided by the scaling factor → N × H × W × 3 (not clamped),
// as AutoencoderKL::decode_nhwc. Checks `tiling` first.
Tensor tiled_decode_nhwc(const AutoencoderKL& vae, const Tensor& z, const VaeTiling& tiling);

}  // namespace octodiff
