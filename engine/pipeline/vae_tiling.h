// How the VAE decodes large images: in tiles or whole (pipeline/tiled_decode.h does the work).
#pragma once

#include <cstdint>
#include <string>

namespace octodiff {

// auto: tile when the image has more than kAutoTilingPixels pixels; on: tile whenever the latents
// are larger than one tile; off: never.
enum class VaeTilingMode { Auto, On, Off };
VaeTilingMode parse_vae_tiling_mode(const std::string& name);  // "auto", "on", "off"
std::string vae_tiling_mode_name(VaeTilingMode mode);

// Images with more pixels than this are decoded in tiles under VaeTilingMode::Auto: 800 × 800,
// where a whole SD VAE decode's activations reach ~1.6 GB (measured: ~2.6 GB at 1024 × 1024,
// tiled_decode.cpp).
constexpr int64_t kAutoTilingPixels = 800 * 800;

// In latent pixels (× the VAE's scale factor, 8 for SD, in image pixels).
struct VaeTiling {
  VaeTilingMode mode = VaeTilingMode::Auto;
  int tile = 64;     // the side of a square tile (64: 512 image pixels)
  int overlap = 16;  // what neighbouring tiles share at least, blended linearly (16: 128 pixels)
};

// Throws octodiff::Error naming the bad value: tile < kMinVaeTile, overlap < 1 or > tile / 2.
constexpr int kMinVaeTile = 4;
void check_vae_tiling(const VaeTiling& tiling);

}  // namespace octodiff
