#include "vae_tiling.h"

#include <cstdio>

#include "bench_timing.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/files.h"
#include "io/weight_source.h"
#include "models/autoencoder_kl.h"
#include "pipeline/decode.h"

namespace octodiff::bench {
namespace fs = std::filesystem;

nlohmann::json run_vae_tiling_bench(const fs::path& model, const VaeTilingOptions& o) {
  const fs::path dir = fs::is_directory(model / "vae") ? model / "vae" : model;
  const fs::path weights = dir / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(weights)) fail("--vae-tiling needs a diffusers folder with vae/: '", weights.string(), "' is missing");
  const VaeConfig config = VaeConfig::from_json(read_text_file(dir / "config.json"), (dir / "config.json").string());
  auto w = weights_from_safetensors({weights}, weights.string());
  const auto precision = o.dtype == ComputeDType::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
  const AutoencoderKL vae = AutoencoderKL::load(*w, config, /*with_encoder=*/false, precision);
  w.reset();  // the checkpoint's mapping: only the packed decoder stays
  const int scale = static_cast<int>(config.scale_factor());
  if (o.height % scale || o.width % scale)
    fail("the size ", o.width, "x", o.height, " is not a multiple of the VAE's scale factor ", scale);
  const int64_t h = o.height / scale, w_lat = o.width / scale;
  const bool tiled = vae_decode_uses_tiles(o.tiling, h, w_lat, scale);
  const Tensor z = pseudo_random({1, h, w_lat, config.latent_channels}, 11);
  nlohmann::json j;
  j["height"] = o.height;
  j["width"] = o.width;
  j["vae_tiling"] = vae_tiling_mode_name(o.tiling.mode);
  j["tiled"] = tiled;
  if (tiled) j["tile_px"] = {o.tiling.tile * scale, o.tiling.overlap * scale};
  j["rss_before_decode_mb"] = current_rss_bytes() / 1048576.0;
  j["peak_rss_before_decode_mb"] = peak_rss_bytes() / 1048576.0;
  std::fprintf(stderr, "VAE decode %dx%d %s...\n", o.width, o.height, tiled ? "in tiles" : "whole");
  DeviceScope scope(DeviceContext{0, o.threads > 0 ? o.threads : hardware_threads(), nullptr});
  const Tensor image = decode_with_vae(vae, z, Compat::Diffusers, tiled ? &o.tiling : nullptr);
  j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
  j["image_shape"] = image.shape();
  return j;
}

void print_vae_tiling_bench(const nlohmann::json& j) {
  std::printf("VAE decode %dx%d, %s (--vae-tiling %s): resident before the decode %.0f MB, peak %.0f MB\n",
              j["width"].get<int>(), j["height"].get<int>(), j["tiled"].get<bool>() ? "in tiles" : "whole",
              j["vae_tiling"].get<std::string>().c_str(), j["rss_before_decode_mb"].get<double>(),
              j["peak_rss_mb"].get<double>());
}

}  // namespace octodiff::bench
