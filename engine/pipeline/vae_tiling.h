// How the VAE decodes large images: in tiles or whole (pipeline/tiled_decode.h does the work).
#pragma once

#include <cstdint>
#include <string>

namespace octodiff {

// auto: tile only when a whole decode would not fit comfortably (below); on: tile whenever the
// latents are larger than one tile; off: never. Tiles give the whole decode's image to float32
// rounding (tiled_decode.h), at a few per cent more time.
enum class VaeTilingMode { Auto, On, Off };
VaeTilingMode parse_vae_tiling_mode(const std::string& name);  // "auto", "on", "off"
std::string vae_tiling_mode_name(VaeTilingMode mode);

// A whole SD VAE decode's activations per image pixel of the device batch, f32 (measured:
// ~2.6 GB at 1024 × 1024, tiled_decode.cpp). Under VaeTilingMode::Auto a decode tiles only when
// its activations would take more than kAutoTilingMemoryShare of the machine's physical memory
// (24 GiB: above ~2.4 megapixels, 1550 × 1550; a 16 GB laptop: above ~1.6 megapixels).
constexpr double kVaeDecodeBytesPerPixel = 2500.0;
constexpr double kAutoTilingMemoryShare = 0.25;

// In latent pixels (× the VAE's scale factor, 8 for SD, in image pixels).
struct VaeTiling {
  VaeTilingMode mode = VaeTilingMode::Auto;
  int tile = 64;     // every decoder layer runs in tiles of tile × tile of its own pixels (64: `--vae-tile 512`)
  int overlap = 16;  // unused since tiles are exact (no blending); kept so older settings and metadata parse
};

// Throws octodiff::Error naming the bad value: tile < kMinVaeTile, overlap < 1 or > tile / 2 (the
// overlap is still checked so that a setting valid before stays the only kind accepted).
constexpr int kMinVaeTile = 4;
void check_vae_tiling(const VaeTiling& tiling);

}  // namespace octodiff
