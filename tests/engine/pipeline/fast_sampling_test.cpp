// Few-step sampling through the whole pipeline (issue 20): an LCM-distilled UNet (guidance as its
// input, one pass a step, LCM's fresh noise each step) against diffusers'
// LatentConsistencyModelPipeline on tests/data/tiny-lcm; guidance ≤ 1 as one pass in both compat
// modes (SD-Turbo-style runs); the tiny autoencoder as the final decoder against diffusers'
// StableDiffusionPipeline with vae=AutoencoderTiny (tests/data/tiny-taesd), and as the preview.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden_requests.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::vector<std::string> golden_prompts() {
  const auto pj = nlohmann::json::parse(read_text_file(test::tiny_sd_dir() / "goldens" / "prompts.json"));
  std::vector<std::string> prompts;
  for (const auto& p : pj["pipeline_prompts"]) prompts.push_back(p.get<std::string>());
  return prompts;
}

std::shared_ptr<const StableDiffusionModel> tiny_lcm() {
  static auto model = StableDiffusionModel::load(test::data_dir() / "tiny-lcm");
  return model;
}

std::shared_ptr<const StableDiffusionModel> tiny_sd_with_taesd() {
  static auto model = [] {
    ModelLoadOptions o;
    o.tiny_autoencoder = test::data_dir() / "tiny-taesd";
    return StableDiffusionModel::load(test::tiny_sd_dir(), o);
  }();
  return model;
}

struct LcmCase {
  int steps;
  double guidance;
  const char* golden;
};

class LcmPipelineParity : public ::testing::TestWithParam<LcmCase> {};

TEST_P(LcmPipelineParity, MatchesLatentConsistencyModelPipeline) {
  const LcmCase c = GetParam();
  auto g = SafetensorsFile::open(test::data_dir() / "tiny-lcm" / "goldens" / "pipeline.safetensors");
  ShardedPipeline pipe(tiny_lcm());
  GenerationRequest req;
  req.prompts = golden_prompts();
  req.steps = c.steps;
  req.guidance_scale = c.guidance;
  req.compat = Compat::Diffusers;
  req.latents = g->to_f32("latents_init").reshaped({2, 1, 4, 32, 32});
  // The goldens' step noise [3, 2, 4, 32, 32]; LCM's last call adds none (its rows stay zero).
  req.step_noise = test::step_noise_per_device(g->to_f32("step_noise"), c.steps, c.steps - 1);
  const GenerationResult res = pipe.run(req);

  const std::string name = c.golden;
  EXPECT_EQ(res.signature.scheduler, SchedulerKind::Lcm) << "the model's own scheduler";
  EXPECT_TRUE(res.signature.embedded_guidance);
  EXPECT_FALSE(res.signature.guidance) << "one UNet pass a step, no negative prompt";
  EXPECT_EQ(res.model_calls, c.steps);
  const Tensor denoised = g->to_f32(name + ".denoised_steps");
  const Tensor ref = denoised.slice0(c.steps - 1, c.steps).reshaped({2, 4, 32, 32});
  test::expect_parity("LCM pipeline " + name + " final latents", res.final_latents.reshaped({2, 4, 32, 32}), ref);
  test::expect_close_abs("LCM pipeline " + name + " images", res.images.reshaped({2, 64, 64, 3}),
                         g->to_f32(name + ".images"), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(StepsAndGuidance, LcmPipelineParity,
                         ::testing::Values(LcmCase{1, 8.0, "n1_g8"}, LcmCase{1, 1.5, "n1_g1.5"},
                                           LcmCase{2, 8.0, "n2_g8"}, LcmCase{2, 1.5, "n2_g1.5"},
                                           LcmCase{4, 8.0, "n4_g8"}, LcmCase{4, 1.5, "n4_g1.5"}),
                         [](const auto& info) { return test::param_name(info.param.golden); });

// Without injected noise each step draws normal(fold_in(key_d, i)) (schedulers/scheduler.h):
// injecting exactly that noise changes nothing, and so does the thread count.
TEST(LcmStepNoise, IsDrawnFromTheDeviceKeysByTheDocumentedRule) {
  ShardedPipeline pipe(tiny_lcm());
  GenerationRequest req;
  req.prompts = golden_prompts();
  req.steps = 4;
  req.seed = 77;
  req.threads = 1;
  const GenerationResult drawn = pipe.run(req);
  req.step_noise = test::step_noise_by_rule(drawn.device_keys, 4, 4, 32, 32, req.rng);
  req.threads = 2;
  const GenerationResult injected = pipe.run(req);
  EXPECT_EQ(test::diff(injected.images, drawn.images).max_abs, 0.0);
  // The noise matters: other noise gives other images.
  for (float& v : *req.step_noise) v = -v;
  EXPECT_GT(test::diff(pipe.run(req).images, drawn.images).max_abs, 1e-3);
}

TEST(LcmStepNoise, WrongInjectedShapeIsAClearError) {
  ShardedPipeline pipe(tiny_lcm());
  GenerationRequest req;
  req.prompts = golden_prompts();
  req.steps = 4;
  req.step_noise = Tensor::zeros({2, 3, 1, 4, 32, 32});
  try {
    pipe.run(req);
    FAIL() << "accepted step noise for 3 calls in a 4-call run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this run needs (2, 4, 1, 4, 32, 32)"), std::string::npos) << e.what();
  }
}

// SD-Turbo-style runs: at guidance ≤ 1 one pass on the prompts alone, in both compat modes, so
// the scale (0 or 1) no longer matters and the negative prompt is not used.
TEST(GuidanceAtMostOne, RunsOnePassOnThePromptsAloneInBothCompatModes) {
  ShardedPipeline pipe(StableDiffusionModel::load(test::tiny_sd_dir()));
  for (Compat compat : {Compat::Flax, Compat::Diffusers}) {
    GenerationRequest req;
    req.prompts = golden_prompts();
    req.negative_prompts = {"a blurry picture"};
    req.steps = 2;
    req.scheduler = SchedulerKind::Euler;
    req.compat = compat;
    req.guidance_scale = 0.0;
    const GenerationResult zero = pipe.run(req);
    EXPECT_FALSE(zero.signature.guidance) << compat_name(compat);
    req.guidance_scale = 1.0;
    req.negative_prompts = {};
    const GenerationResult one = pipe.run(req);
    EXPECT_FALSE(one.signature.guidance) << compat_name(compat);
    EXPECT_EQ(test::diff(zero.images, one.images).max_abs, 0.0) << compat_name(compat);
    req.guidance_scale = 1.5;
    const GenerationResult guided = pipe.run(req);
    EXPECT_TRUE(guided.signature.guidance) << compat_name(compat);
    EXPECT_GT(test::diff(guided.images, one.images).max_abs, 1e-4) << compat_name(compat);
  }
}

TEST(TinyAutoencoderDecoder, MatchesStableDiffusionPipelineWithAutoencoderTiny) {
  auto g = SafetensorsFile::open(test::data_dir() / "tiny-taesd" / "goldens" / "pipeline_tiny_sd.safetensors");
  const auto pj = nlohmann::json::parse(read_text_file(test::tiny_sd_dir() / "goldens" / "prompts.json"));
  ShardedPipeline pipe(tiny_sd_with_taesd());
  GenerationRequest req;
  req.prompts = golden_prompts();
  req.negative_prompts = {pj["pipeline_negative_prompt"].get<std::string>()};
  req.steps = 5;
  req.guidance_scale = 7.5;
  req.scheduler = SchedulerKind::Pndm;
  req.compat = Compat::Diffusers;
  req.decoder = Decoder::Tiny;
  req.height = req.width = 128;  // TAESD's 8 pixels per latent, as diffusers sizes it
  req.latents = g->to_f32("latents_init").reshaped({2, 1, 4, 16, 16});
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.signature.decoder, Decoder::Tiny);
  test::expect_parity("TAESD pipeline final latents", res.final_latents.reshaped({2, 4, 16, 16}),
                      g->to_f32("latents_final"));
  test::expect_close_abs("TAESD pipeline images", res.images.reshaped({2, 128, 128, 3}), g->to_f32("images"), 1e-3);
}

TEST(TinyAutoencoderDecoder, IsAClearErrorWithoutOne) {
  ShardedPipeline pipe(StableDiffusionModel::load(test::tiny_sd_dir()));
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.decoder = Decoder::Tiny;
  try {
    pipe.resolve(req);
    FAIL() << "decoder taesd accepted without a tiny autoencoder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--taesd PATH"), std::string::npos) << e.what();
  }
}

TEST(TinyAutoencoderDecoder, DecodesThePreviewsWhenLoaded) {
  ShardedPipeline pipe(tiny_sd_with_taesd());
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 2;
  req.preview = true;  // the final images stay the VAE's
  int previews = 0;
  const GenerationResult res = pipe.run(req, {}, [&](int, int, const Image8& image) {
    ++previews;
    EXPECT_EQ(image.width, 32 * 8);  // 32×32 latents, TAESD's 8× (the linear preview would be 32)
    EXPECT_EQ(image.height, 32 * 8);
  });
  EXPECT_EQ(previews, 2);
  EXPECT_EQ(res.images.dim(2), 64);  // the VAE's 2× for the final images
}

}  // namespace
