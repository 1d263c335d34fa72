#include "pipeline/tiled_decode.h"

#include <algorithm>

#include "core/error.h"
#include "core/memory.h"
#include "models/tiled_layers.h"
#include "pipeline/model_hash.h"

namespace octodiff {

VaeTilingMode parse_vae_tiling_mode(const std::string& name) {
  if (name == "auto") return VaeTilingMode::Auto;
  if (name == "on") return VaeTilingMode::On;
  if (name == "off") return VaeTilingMode::Off;
  fail("unknown VAE tiling '", name, "' (expected 'auto', 'on' or 'off')");
}

std::string vae_tiling_mode_name(VaeTilingMode mode) {
  switch (mode) {
    case VaeTilingMode::Auto: return "auto";
    case VaeTilingMode::On: return "on";
    case VaeTilingMode::Off: return "off";
  }
  return "?";
}

void check_vae_tiling(const VaeTiling& t) {
  if (t.tile < kMinVaeTile)
    fail("VAE tile size ", t.tile, " latent pixels is too small (at least ", kMinVaeTile, ")");
  if (t.overlap < 1 || t.overlap > t.tile / 2)
    fail("VAE tile overlap ", t.overlap, " latent pixels must be between 1 and half the tile size (", t.tile / 2,
         ") so that neighbouring tiles blend");
}

// The measured activation memory behind kVaeDecodeBytesPerPixel (full-size random SD 1.5 VAE, f32, 2
// threads, `/usr/bin/time -v octodiff-bench --vae-tiling off|on --height 1024 --width 1024`, the
// VAE loaded alone): a whole 1024 × 1024 decode peaked at 2943 MB with 344 MB resident before it,
// i.e. ~2.6 GB of activations, ~2.5 kB per image pixel and growing with the pixels. The exact
// layer-by-layer tiles peak at 633 MB (344 MB before the decode: ~290 MB for the activations;
// 2026-11-26, build 39d9777; the blended tiles they replaced peaked at 861 MB).
bool vae_decode_uses_tiles(const VaeTiling& t, int64_t latent_height, int64_t latent_width, int scale,
                           int64_t batch, double memory_bytes) {
  check_vae_tiling(t);
  const bool larger_than_a_tile = latent_height > t.tile || latent_width > t.tile;
  switch (t.mode) {
    case VaeTilingMode::Off: return false;
    case VaeTilingMode::On: return larger_than_a_tile;
    case VaeTilingMode::Auto: {
      if (memory_bytes <= 0) memory_bytes = physical_memory_bytes();
      const double pixels = static_cast<double>(latent_height * scale) * static_cast<double>(latent_width * scale);
      const double whole_decode_bytes = kVaeDecodeBytesPerPixel * pixels * static_cast<double>(std::max<int64_t>(batch, 1));
      return larger_than_a_tile && whole_decode_bytes > kAutoTilingMemoryShare * memory_bytes;
    }
  }
  return false;
}

std::filesystem::path vae_scratch_dir() { return octodiff_cache_dir() / "vae-scratch"; }

Tensor tiled_decode_nhwc(const AutoencoderKL& vae, const Tensor& z, const VaeTiling& t,
                         const std::optional<std::filesystem::path>& scratch_dir) {
  check_vae_tiling(t);
  Tensor mid = vae.decode_mid_nhwc(z);  // checks z's shape
  std::optional<ActivationScratch> scratch;
  if (scratch_dir) {
    std::error_code ec;
    std::filesystem::create_directories(*scratch_dir, ec);  // if it cannot be made, allocations fall back to the heap
    scratch.emplace(*scratch_dir);
  }
  return vae.decode_up_in_tiles_nhwc(std::move(mid), t.tile, scratch ? &*scratch : nullptr);
}

}  // namespace octodiff
