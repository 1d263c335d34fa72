// Tiled VAE decoding (pipeline/tiled_decode.h: every decoder layer computed tile by tile, GroupNorm
// statistics of the whole image) against the whole decode of the same latents (images in [0, 1],
// scale ~1): within 1e-3 for every tile size, tiny ones included, on the tiny-sd VAE (scale factor
// 2) and on a random VAE of SD's real widths (128/256/512/512, 32 groups, scale factor 8) at
// small latents; the error at the pixels next to tile edges (where a seam would show) is printed
// and checked on its own. Bad tile settings and tiling modes get clear errors; the pipeline says
// in its result and the PNG metadata when tiles were used.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/single_file.h"
#include "io/weight_source.h"
#include "models/parameter_catalog.h"
#include "pipeline/decode.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "pipeline/tiled_decode.h"
#include "test_support.h"

using namespace octodiff;

namespace {

const AutoencoderKL& tiny_vae() {
  static const AutoencoderKL vae = [] {
    const auto dir = test::tiny_sd_dir() / "vae";
    auto w = weights_from_safetensors({dir / "diffusion_pytorch_model.safetensors"}, "vae");
    auto cfg = VaeConfig::from_json(read_text_file(dir / "config.json"), "vae/config.json");
    return AutoencoderKL::load(*w, cfg, /*with_encoder=*/false);
  }();
  return vae;
}

// Latents as sampling leaves them (N × h × w × 4, NHWC): normal × the scaling factor, so that the
// decoder sees N(0, 1) values.
Tensor random_latents(int64_t n, int64_t h, int64_t w, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor z = Tensor::empty({n, h, w, 4});
  for (float& v : z) v = normal(gen) * 0.18215f;
  return z;
}

// A VAE of SD's widths and depth (VaeConfig::sd(): 49 M decoder parameters) with the catalog's
// synthetic weights (~N(0, 1/fan_in)), loaded from a bf16 file written once (deleted after).
const AutoencoderKL& sd_width_vae() {
  static const AutoencoderKL vae = [] {
    const VaeConfig config = VaeConfig::sd();
    const auto file = test::temp_dir("tiled_decode_sd_width_vae") / "vae.safetensors";
    std::vector<TensorToWrite> list;
    for (const ParameterSpec& spec : vae_parameters(config, /*with_encoder=*/false))
      list.push_back({spec.name, DType::BF16, spec.shape, [spec](uint8_t* dst, size_t) {
                        std::vector<float> values(shape_numel(spec.shape));
                        synthetic_parameter_values(spec, 7, values.data());
                        store_floats(values.data(), static_cast<int64_t>(values.size()), DType::BF16, dst);
                      }});
    write_safetensors(file, list);
    auto w = weights_from_safetensors({file}, "sd-width vae");
    AutoencoderKL loaded = AutoencoderKL::load(*w, config, /*with_encoder=*/false);
    w.reset();
    std::filesystem::remove(file);
    return loaded;
  }();
  return vae;
}

constexpr double kTiledTolerance = 1e-3;  // × the whole image's scale (max abs, ~1 for images in [0, 1])

// The largest |tiled − whole| over the pixels within one pixel of a tile edge of the full-resolution
// layers (tiles of `tile` image pixels), and over the others.
std::pair<double, double> edge_and_inner_errors(const Tensor& tiled, const Tensor& whole, int64_t tile) {
  const int64_t N = whole.dim(0), H = whole.dim(1), W = whole.dim(2), C = whole.dim(3);
  auto near_edge = [tile](int64_t p) { return p % tile == 0 || p % tile == tile - 1; };
  double edge = 0, inner = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = ((n * H + y) * W + x) * C + c;
          const double e = std::abs(static_cast<double>(tiled[i]) - whole[i]);
          double& m = near_edge(y) || near_edge(x) ? edge : inner;
          m = std::max(m, e);
        }
  return {edge, inner};
}

// Decodes `latents` whole, then tiled with each of `tiles` (layer pixels), and checks every tiled
// image against the whole one.
void expect_tiled_matches(const std::string& label, const AutoencoderKL& vae, const Tensor& latents,
                          const std::vector<int>& tiles) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const Tensor whole = decode_with_vae(vae, latents, Compat::Diffusers);
  const double whole_s = std::chrono::duration<double>(clock::now() - t0).count();
  const double scale = test::diff(whole, whole).ref_scale;
  for (const int tile : tiles) {
    const VaeTiling tiling{VaeTilingMode::On, tile, std::max(1, tile / 2)};
    const auto t1 = clock::now();
    const Tensor tiled = decode_with_vae(vae, latents, Compat::Diffusers, &tiling);
    const double tiled_s = std::chrono::duration<double>(clock::now() - t1).count();
    ASSERT_EQ(tiled.shape(), whole.shape());
    const auto [edge, inner] = edge_and_inner_errors(tiled, whole, tile);
    const std::string what = label + ", tile " + std::to_string(tile);
    std::printf("[%s] %lldx%lld latents, batch %lld: max abs err %.3e at tile edges, %.3e elsewhere (image scale "
                "%.3f); whole %.2f s, tiled %.2f s\n",
                what.c_str(), static_cast<long long>(latents.dim(1)), static_cast<long long>(latents.dim(2)),
                static_cast<long long>(latents.dim(0)), edge, inner, scale, whole_s, tiled_s);
    EXPECT_LE(edge, kTiledTolerance * scale) << what << ": a seam at the tile edges";
    test::expect_close_abs(what, tiled, whole, kTiledTolerance * scale);
    EXPECT_GT(whole.dim(1), tile) << "the case must exercise several tiles";
  }
}

}  // namespace

TEST(TiledDecode, MatchesTheWholeDecodeOnTheTinyVae) {
  expect_tiled_matches("tiny vae 80x80", tiny_vae(), random_latents(1, 80, 80, 1), {60, 24, 4});
  expect_tiled_matches("tiny vae 48x48 batch 2", tiny_vae(), random_latents(2, 48, 48, 1), {24, 7});
  expect_tiled_matches("tiny vae 45x53 (tiles do not divide)", tiny_vae(), random_latents(1, 45, 53, 3), {7, 5});
  expect_tiled_matches("tiny vae 10x61", tiny_vae(), random_latents(1, 10, 61, 4), {4});
}

TEST(TiledDecode, MatchesTheWholeDecodeOnASdWidthVae) {
  expect_tiled_matches("sd-width vae 32x32", sd_width_vae(), random_latents(1, 32, 32, 8), {64, 7});
  expect_tiled_matches("sd-width vae 12x20", sd_width_vae(), random_latents(1, 12, 20, 10), {4});
}

TEST(TiledDecode, ScratchFilesHoldWhatTheHeapWould) {
  const Tensor z = random_latents(1, 30, 22, 11);
  const VaeTiling tiling{VaeTilingMode::On, 6, 3};
  const auto dir = test::temp_dir("tiled_decode_scratch") / "scratch";
  const Tensor heap = tiled_decode_nhwc(tiny_vae(), z, tiling, std::nullopt);
  const Tensor files = tiled_decode_nhwc(tiny_vae(), z, tiling, dir);
  ASSERT_EQ(files.shape(), heap.shape());
  const test::Diff d = test::diff(files, heap);
  std::printf("[tiled decode] scratch files vs heap: max abs difference %.3e\n", d.max_abs);
  EXPECT_EQ(d.max_abs, 0.0);
  ASSERT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "scratch files must not outlive the decode";
  const auto not_a_folder = test::temp_dir("tiled_decode_scratch_file") / "file";
  write_file_atomic(not_a_folder, "x", 1);
  const Tensor fallback = tiled_decode_nhwc(tiny_vae(), z, tiling, not_a_folder / "scratch");
  EXPECT_EQ(test::diff(fallback, heap).max_abs, 0.0);
}

// The upsampled layers are more than one tile, and a tile's 3×3 convolutions start their
// Winograd tiles one halo pixel before the whole tensor's: the same sums, rounded in other tiles.
// Measured: 1.9e-6 with F(2×2) tiles, 2.5e-6 direct, 1.1e-5 with the f32 VAE's F(4×4) tiles
// (transform coefficients up to 8) against a largest value of 1.44.
TEST(TiledDecode, OneTileIsTheWholeDecode) {
  const Tensor z = random_latents(1, 20, 28, 6);
  test::expect_close_abs("one tile vs whole decode", tiled_decode_nhwc(tiny_vae(), z, {VaeTilingMode::On, 32, 8}),
                         tiny_vae().decode_nhwc(z), 2e-5);
}

TEST(TiledDecode, BadSettingsGetClearErrors) {
  const Tensor z = random_latents(1, 16, 16, 5);
  auto message = [&](VaeTiling t) {
    try {
      tiled_decode_nhwc(tiny_vae(), z, t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({VaeTilingMode::On, 2, 1}).find("VAE tile size 2"), std::string::npos) << message({VaeTilingMode::On, 2, 1});
  EXPECT_NE(message({VaeTilingMode::On, 8, 0}).find("VAE tile overlap 0"), std::string::npos);
  EXPECT_NE(message({VaeTilingMode::On, 8, 5}).find("half the tile size (4)"), std::string::npos);
  EXPECT_THROW(parse_vae_tiling_mode("sometimes"), Error);
  EXPECT_EQ(parse_vae_tiling_mode("on"), VaeTilingMode::On);
  // The wrong latent channels: the decoder's own message.
  EXPECT_THROW(tiled_decode_nhwc(tiny_vae(), Tensor::zeros({1, 16, 16, 3}), {VaeTilingMode::On, 8, 2}), Error);
}

TEST(TiledDecode, AutoTilesOnlyWhenAWholeDecodeWouldNotFit) {
  const VaeTiling aut{VaeTilingMode::Auto, 64, 16};
  const double gib = 1024.0 * 1024.0 * 1024.0;
  // 16 GiB: a quarter is 4 GiB, i.e. ~1.7 megapixels of a whole decode at 2.5 kB per pixel.
  EXPECT_FALSE(vae_decode_uses_tiles(aut, 64, 64, 8, 1, 16 * gib));     // 512 × 512
  EXPECT_FALSE(vae_decode_uses_tiles(aut, 128, 128, 8, 1, 16 * gib));   // 1024 × 1024: 2.6 GB
  EXPECT_TRUE(vae_decode_uses_tiles(aut, 128, 128, 8, 2, 16 * gib));    // two of them: 5.2 GB
  EXPECT_TRUE(vae_decode_uses_tiles(aut, 192, 192, 8, 1, 16 * gib));    // 1536 × 1536: 5.9 GB
  EXPECT_FALSE(vae_decode_uses_tiles(aut, 192, 192, 8, 1, 64 * gib));   // ... on a 64 GiB machine
  EXPECT_TRUE(vae_decode_uses_tiles(aut, 128, 128, 8, 1, 4 * gib));     // 1024 × 1024 on 4 GiB
  EXPECT_FALSE(vae_decode_uses_tiles(aut, 64, 64, 8, 1, 0.1 * gib));    // one tile: whole whatever the memory
  EXPECT_FALSE(vae_decode_uses_tiles(aut, 64, 64, 8));                  // this machine, 512 × 512
  EXPECT_FALSE(vae_decode_uses_tiles({VaeTilingMode::Off, 64, 16}, 256, 256, 8, 1, 1 * gib));
  EXPECT_TRUE(vae_decode_uses_tiles({VaeTilingMode::On, 64, 16}, 65, 64, 8));
  EXPECT_FALSE(vae_decode_uses_tiles({VaeTilingMode::On, 64, 16}, 64, 64, 8));  // one tile: whole
}

TEST(TiledDecode, PipelineReportsTilesInResultAndMetadata) {
  ModelLoadOptions o;
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  ShardedPipeline pipe(model);
  GenerationRequest req;
  req.prompts = {"a tiled picture"};
  req.steps = 2;
  req.height = req.width = 64;  // 32 × 32 latents
  req.compat = Compat::Diffusers;
  req.vae_tiling = {VaeTilingMode::Off, 16, 8};  // 3 × 3 tiles of 16 when on
  const GenerationResult whole = pipe.run(req);
  EXPECT_FALSE(whole.vae_tiles.has_value());
  const ImageMetadata whole_meta = describe_image(req, whole, *model, 0, 0);
  EXPECT_EQ(a1111_parameters(whole_meta).find("VAE tile"), std::string::npos);

  req.vae_tiling.mode = VaeTilingMode::On;
  const GenerationResult tiled = pipe.run(req);
  ASSERT_TRUE(tiled.vae_tiles.has_value());
  test::expect_close_abs("pipeline images, tiled vs whole", tiled.images, whole.images, kTiledTolerance);
  const ImageMetadata meta = describe_image(req, tiled, *model, 0, 0);
  EXPECT_NE(a1111_parameters(meta).find("VAE tile: 32, VAE tile overlap: 16"), std::string::npos)
      << a1111_parameters(meta);
  const auto back = parse_png_metadata(png_texts(meta));
  ASSERT_TRUE(back && back->vae_tiles);
  const GenerationRequest again = request_from_metadata(*back);
  EXPECT_EQ(again.vae_tiling.mode, VaeTilingMode::On);
  EXPECT_EQ(again.vae_tiling.tile, 16);
  EXPECT_EQ(again.vae_tiling.overlap, 8);

  req.vae_tiling = {VaeTilingMode::On, 16, 9};
  EXPECT_THROW(pipe.run(req), Error);  // checked when the request is resolved
}

