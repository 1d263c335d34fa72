// How the VAE decodes large images: in tiles or whole (pipeline/tiled_decode.h does the work).
#pragma once

#include <cstdint>
#include <string>

namespace octodiff {

// auto: tile only when a whole decode would not fit comfortably (below); on: tile whenever the
// latents are larger than one tile; off: never. Tiles approximate the whole decode (tiled_decode.h).
enum class VaeTilingMode { Auto, On, Off };
VaeTilingMode parse_vae_tiling_mode(const std::string& name);  // "auto", "on", "off"
std::string vae_tiling_mode_name(VaeTilingMode mode);

// A whole SD VAE decode's activations per image pixel of the device batch, f32 (measured:
// ~2.6 GB at 1024 × 1024, tiled_decode.cpp). Under VaeTilingMode::Auto a decode tiles only when
// its activations would take more than kAutoTilingMemoryShare of the machine's physical memory
// (24 GiB: above ~2.4 megapixels, 1550 × 1550; a 16 GB laptop: above ~1.6 megapixels), so the
// usual sizes decode whole and exactly.
constexpr double kVaeDecodeBytesPerPixel = 2500.0;
constexpr double kAutoTilingMemoryShare = 0.25;

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
