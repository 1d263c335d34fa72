// Fast SDXL (issue 23): the tiny autoencoder for SDXL latents (TAESDXL) as the final decoder and
// the preview, and SDXL-Turbo runs (Euler ancestral with trailing timesteps from the model's own
// scheduler config, guidance 0: one UNet pass a step, no negative) — against diffusers'
// StableDiffusionXLPipeline on the tiny SDXL (tests/data/tiny-taesdxl, tests/data/tiny-sdxl-turbo,
// tools/goldens/make_sdxl_fast_goldens.py). f32 at the parity bar (1e-4 of scale), errors printed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden_requests.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

nlohmann::json settings() { return nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json")); }

std::vector<std::string> pipeline_prompts() {
  const nlohmann::json s = settings();
  std::vector<std::string> p;
  for (const auto& prompt : s["pipeline_prompts"]) p.push_back(prompt.get<std::string>());
  return p;
}

std::shared_ptr<const StableDiffusionModel> tiny_sdxl_with_taesd() {
  static auto model = [] {
    ModelLoadOptions o;
    o.tiny_autoencoder = test::data_dir() / "tiny-taesdxl";
    return StableDiffusionModel::load(sdxl_dir(), o);
  }();
  return model;
}

// The tiny SDXL's networks with stabilityai/sdxl-turbo's scheduler config, as a model folder.
fs::path tiny_sdxl_turbo_dir() {
  static const fs::path dir = [] {
    const fs::path d = test::temp_dir("tiny_sdxl_turbo");
    for (const char* part : {"text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "unet", "vae"})
      fs::copy(sdxl_dir() / part, d / part, fs::copy_options::recursive);
    fs::copy(test::data_dir() / "tiny-sdxl-turbo" / "scheduler", d / "scheduler", fs::copy_options::recursive);
    auto index = nlohmann::json::parse(read_text_file(sdxl_dir() / "model_index.json"));
    index["scheduler"] = {"diffusers", "EulerAncestralDiscreteScheduler"};
    const std::string text = index.dump(2);
    write_file_atomic(d / "model_index.json", text.data(), text.size());
    return d;
  }();
  return dir;
}

std::shared_ptr<const StableDiffusionModel> tiny_sdxl_turbo() {
  ModelLoadOptions o;
  o.weight_cache = false;  // a folder made per test: no cache files for it
  return StableDiffusionModel::load(tiny_sdxl_turbo_dir(), o);
}

std::shared_ptr<SafetensorsFile> turbo_goldens() {
  return SafetensorsFile::open(test::data_dir() / "tiny-sdxl-turbo" / "goldens" / "pipeline.safetensors");
}

}  // namespace

TEST(SdxlTaesd, MatchesStableDiffusionXLPipelineWithAutoencoderTiny) {
  auto g = SafetensorsFile::open(test::data_dir() / "tiny-taesdxl" / "goldens" / "pipeline_tiny_sdxl.safetensors");
  ShardedPipeline pipe(tiny_sdxl_with_taesd());
  GenerationRequest req;
  req.prompts = pipeline_prompts();
  req.negative_prompts = {settings()["pipeline_negative_prompt"].get<std::string>()};
  req.steps = 5;
  req.guidance_scale = 5.0;
  req.compat = Compat::Diffusers;
  req.decoder = Decoder::Tiny;
  req.latents = g->to_f32("latents_init").reshaped({2, 1, 4, 16, 16});
  const GenerationResult res = pipe.run(req);  // TAESD's 8 pixels per latent: 128 × 128 by default
  EXPECT_EQ(res.signature.decoder, Decoder::Tiny);
  EXPECT_EQ(res.signature.height, 128);
  test::expect_parity("TAESDXL pipeline final latents", res.final_latents.reshaped({2, 4, 16, 16}),
                      g->to_f32("latents_final"));
  test::expect_parity("TAESDXL pipeline images", res.images.reshaped({2, 128, 128, 3}), g->to_f32("images"));
}

TEST(SdxlTaesd, DecodesThePreviewsWhenLoaded) {
  ShardedPipeline pipe(tiny_sdxl_with_taesd());
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 2;
  req.height = req.width = 32;  // the VAE's default size: 16 × 16 latents
  req.preview = true;           // the final images stay the VAE's
  int previews = 0;
  const GenerationResult res = pipe.run(req, {}, [&](int, int, const Image8& image) {
    ++previews;
    EXPECT_EQ(image.width, 16 * 8);  // TAESDXL's 8× (the linear preview would be 16)
    EXPECT_EQ(image.height, 16 * 8);
  });
  EXPECT_EQ(previews, 2);
  EXPECT_EQ(res.images.dim(2), 32);  // the tiny SDXL VAE's 2× for the final images
}

// A TAESD for 4-channel latents fits SDXL's VAE; the check is on the channels only (a TAESD for
// SD 1.x loads too: telling TAESD from TAESDXL by its weights is not possible).
TEST(SdxlTaesd, LoadsBesideTheSdxlModel) {
  auto m = tiny_sdxl_with_taesd();
  ASSERT_TRUE(m->is_sdxl());
  ASSERT_TRUE(m->tiny_autoencoder());
  EXPECT_EQ(m->tiny_autoencoder()->config().latent_channels, m->vae().config().latent_channels);
  EXPECT_EQ(m->tiny_autoencoder()->config().decoder_scale_factor(), 8);
}

struct TurboCase {
  const char* golden;
  int steps;
  int size;
};

class SdxlTurboParity : public ::testing::TestWithParam<TurboCase> {};

// SDXL-Turbo: the model's own Euler ancestral (trailing), guidance 0, the goldens' step noise
// injected (one step adds none: sigma_up is 0).
TEST_P(SdxlTurboParity, MatchesStableDiffusionXLPipeline) {
  const TurboCase c = GetParam();
  const std::string name = c.golden;
  auto g = turbo_goldens();
  ShardedPipeline pipe(tiny_sdxl_turbo());
  ASSERT_EQ(pipe.model().default_scheduler(), SchedulerKind::EulerAncestral);
  GenerationRequest req;
  req.prompts = pipeline_prompts();
  req.steps = c.steps;
  req.guidance_scale = 0.0;
  req.compat = Compat::Diffusers;
  req.height = req.width = c.size;
  const int64_t h = c.size / 2;
  req.latents = g->to_f32(name + ".latents_init").reshaped({2, 1, 4, h, h});
  const Tensor step_noise = g->to_f32(name + ".step_noise");  // [steps, 2, C, h, w]
  req.step_noise = test::step_noise_per_device(step_noise, step_noise.dim(0), step_noise.dim(0));
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.signature.scheduler, SchedulerKind::EulerAncestral) << "the model's own scheduler";
  EXPECT_EQ(res.signature.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_FALSE(res.signature.guidance) << "one UNet pass a step, no negative prompt";
  EXPECT_EQ(res.model_calls, c.steps);
  test::expect_parity("SDXL-Turbo " + name + " final latents", res.final_latents.reshaped({2, 4, h, h}),
                      g->to_f32(name + ".latents_final"));
  test::expect_parity("SDXL-Turbo " + name + " images", res.images.reshaped({2, c.size, c.size, 3}),
                      g->to_f32(name + ".images"));
  if (c.steps > 1) {  // the injected noise is what made it match: the device keys' noise gives other images
    req.step_noise.reset();
    const double moved = test::diff(pipe.run(req).images, res.images).max_abs;
    std::printf("  without diffusers' step noise the images move by %.3g\n", moved);
    EXPECT_GT(moved, 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, SdxlTurboParity,
                         ::testing::Values(TurboCase{"n1", 1, 48}, TurboCase{"n4", 4, 32}),
                         [](const auto& info) { return std::string(info.param.golden); });

// One step draws no noise that counts: without injection (the device keys' noise) the image is
// the same as with diffusers' noise.
TEST(SdxlTurbo, OneStepDependsOnTheInitialLatentsOnly) {
  auto g = turbo_goldens();
  ShardedPipeline pipe(tiny_sdxl_turbo());
  GenerationRequest req;
  req.prompts = pipeline_prompts();
  req.steps = 1;
  req.guidance_scale = 0.0;
  req.compat = Compat::Diffusers;
  req.height = req.width = 48;
  req.latents = g->to_f32("n1.latents_init").reshaped({2, 1, 4, 24, 24});
  const GenerationResult drawn = pipe.run(req);
  test::expect_parity("SDXL-Turbo n1 images, noise drawn from the device keys", drawn.images.reshaped({2, 48, 48, 3}),
                      g->to_f32("n1.images"));
  req.negative_prompts = {"a blurry picture"};  // not used at guidance ≤ 1
  EXPECT_EQ(test::diff(pipe.run(req).images, drawn.images).max_abs, 0.0);
}
