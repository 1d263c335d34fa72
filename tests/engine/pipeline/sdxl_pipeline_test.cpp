// The SDXL pipeline against diffusers' StableDiffusionXLPipeline on the tiny random SDXL
// (tests/data/tiny-sdxl/goldens/pipeline.safetensors, tools/goldens/make_tiny_sdxl.py): loading
// the folder, both tokenizers, the 2048-style context and pooled embeddings, zero negative
// embeddings, the size conditioning, and whole runs in --compat diffusers with the goldens'
// latents. f32: latents and images at the parity bar (1e-4 of scale); every error printed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "kernels/isa.h"
#include "pipeline/sdxl_pipeline.h"
#include "pipeline/single_file_model.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

std::shared_ptr<const StableDiffusionModel> tiny_sdxl() {
  static auto model = StableDiffusionModel::load(sdxl_dir());
  return model;
}

std::shared_ptr<SafetensorsFile> pipeline_golden() {
  return SafetensorsFile::open(sdxl_dir() / "goldens" / "pipeline.safetensors");
}

nlohmann::json settings() { return nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json")); }

std::vector<std::string> pipeline_prompts() {
  const nlohmann::json s = settings();  // (not a temporary in the loop's range: it would dangle)
  std::vector<std::string> p;
  for (const auto& prompt : s["pipeline_prompts"]) p.push_back(prompt.get<std::string>());
  return p;
}

std::vector<int32_t> as_i32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// The ids a tokenizer gives `prompts`, concatenated.
std::vector<int32_t> encode_all(const ClipTokenizer& tok, const std::vector<std::string>& prompts) {
  std::vector<int32_t> ids;
  for (const auto& p : prompts) {
    const auto e = tok.encode(p);
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  }
  return ids;
}

GenerationRequest golden_request(const SafetensorsFile& g, bool negative, double guidance) {
  GenerationRequest req;
  req.prompts = pipeline_prompts();
  if (negative) req.negative_prompts = {settings()["pipeline_negative_prompt"].get<std::string>()};
  req.steps = settings()["steps"].get<int>();
  req.guidance_scale = guidance;
  req.compat = Compat::Diffusers;
  req.latents = g.to_f32("latents_init").reshaped({2, 1, 4, 16, 16});
  return req;
}

void expect_run_matches(const GenerationResult& res, const SafetensorsFile& g, const std::string& name) {
  const auto timesteps = g.to_f64(g.get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;
  const Tensor steps = g.to_f32(name + ".latents_steps");
  const Tensor final_latents = steps.slice0(steps.dim(0) - 1, steps.dim(0)).reshaped({2, 4, 16, 16});
  test::expect_parity("sdxl pipeline " + name + " final latents", res.final_latents.reshaped({2, 4, 16, 16}),
                      final_latents);
  test::expect_parity("sdxl pipeline " + name + " images", res.images.reshaped({2, 32, 32, 3}),
                      g.to_f32(name + ".images"));
}

}  // namespace

TEST(SdxlModel, LoadsTheFolderAsSdxl) {
  auto m = tiny_sdxl();
  EXPECT_TRUE(m->is_sdxl());
  EXPECT_NE(m->description().find("SDXL"), std::string::npos) << m->description();
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Euler);
  EXPECT_EQ(m->default_height(), 32);  // unet sample_size 16 × VAE scale 2 (1024 for SDXL base)
  EXPECT_TRUE(m->force_zeros_for_empty_prompt());
  EXPECT_EQ(m->tokenizer_2().pad_id(), 0);  // "!" pads, as SDXL's tokenizer_2
  EXPECT_NE(m->tokenizer().pad_id(), 0);
  EXPECT_EQ(m->text_encoder_2().config().projection_dim, 40);
  const PackedLayerStats te2 = m->packed_layer_stats(ModelComponent::TextEncoder2);  // recorded for LoRAs
  EXPECT_GT(te2.packed + te2.from_cache, 0);
  m->release(ModelComponent::TextEncoder);   // both text towers
  m->prefetch(ModelComponent::TextEncoder);
  EXPECT_FALSE(StableDiffusionModel::load(test::tiny_sd_dir())->is_sdxl());
}

// diffusers' SDXL pipelines decode a VAE whose config says force_upcast (SDXL base's) in float32;
// so does a bf16 run here, while the fp16-fix VAE (force_upcast false) decodes as any bf16 VAE
// does (bf16 where the CPU's bf16 products are native) and SD 1.x ignores the flag (its VAE configs
// leave it at diffusers' default, true).
TEST(SdxlModel, AForceUpcastVaeRunsInFloat32InABf16Run) {
  ModelLoadOptions bf16;
  bf16.dtype = ComputeDType::BF16;
  bf16.weight_cache = false;
  const auto upcast = StableDiffusionModel::load(sdxl_dir(), bf16);
  EXPECT_EQ(upcast->vae().precision(), kernels::Precision::F32);
  EXPECT_EQ(upcast->dtype(), ComputeDType::BF16);

  const fs::path dir = test::temp_dir("sdxl_fp16_fix_vae");
  fs::copy(sdxl_dir(), dir, fs::copy_options::recursive);
  nlohmann::json vae = nlohmann::json::parse(read_text_file(dir / "vae" / "config.json"));
  ASSERT_TRUE(vae.at("force_upcast").get<bool>());
  vae["force_upcast"] = false;
  const std::string text = vae.dump(2);
  write_file_atomic(dir / "vae" / "config.json", text.data(), text.size());
  // Without force_upcast: bf16 where VDPBF16PS multiplies bf16, float32 where bf16 products are
  // FMAs on widened values (pipeline/model.cpp, vae_load_options; tests/engine/pipeline/bf16_test.cpp).
  const kernels::Precision native =
      kernels::kernel_bf16_dot() ? kernels::Precision::BF16 : kernels::Precision::F32;
  EXPECT_EQ(StableDiffusionModel::load(dir, bf16)->vae().precision(), native);

  EXPECT_EQ(StableDiffusionModel::load(test::tiny_sd_dir(), bf16)->vae().precision(), native);
}

TEST(SdxlModel, AFolderWithoutTextEncoder2IsRefused) {
  const fs::path dir = test::temp_dir("sdxl_without_te2");
  for (const char* part : {"text_encoder", "tokenizer", "unet", "vae", "scheduler"})
    fs::copy(sdxl_dir() / part, dir / part, fs::copy_options::recursive);
  fs::copy_file(sdxl_dir() / "model_index.json", dir / "model_index.json");
  try {
    StableDiffusionModel::load(dir);
    FAIL() << "loaded an SDXL UNet with one text encoder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("width 80"), std::string::npos) << e.what();
  }
}

TEST(SdxlPrompts, BothTokenizersGiveTheGoldenIds) {
  auto m = tiny_sdxl();
  auto g = pipeline_golden();
  const auto prompts = pipeline_prompts();
  const std::string negative = settings()["pipeline_negative_prompt"].get<std::string>();
  EXPECT_EQ(encode_all(m->tokenizer(), prompts), as_i32(g->to_i64("input_ids")));
  EXPECT_EQ(encode_all(m->tokenizer_2(), prompts), as_i32(g->to_i64("input_ids_2")));
  EXPECT_EQ(encode_all(m->tokenizer(), {negative}), as_i32(g->to_i64("negative_input_ids")));
  EXPECT_EQ(encode_all(m->tokenizer_2(), {negative}), as_i32(g->to_i64("negative_input_ids_2")));
}

TEST(SdxlPrompts, ContextAndPooledEmbeddingsMatch) {
  auto m = tiny_sdxl();
  auto g = pipeline_golden();
  const auto prompts = pipeline_prompts();
  const std::string negative = settings()["pipeline_negative_prompt"].get<std::string>();
  const SdxlTokenizedPrompts tokens =
      tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), prompts, {negative, negative}, true);
  const std::array<float, 6> ids = sdxl_time_ids({}, 32, 32);
  const SdxlConditioning c = encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), tokens, 0, 2, true, ids);
  ASSERT_EQ(c.context.shape(), (Shape{4, 77, 80}));
  test::expect_parity("sdxl negative_prompt_embeds", c.context.slice0(0, 2), g->to_f32("negative_prompt_embeds"));
  test::expect_parity("sdxl prompt_embeds", c.context.slice0(2, 4), g->to_f32("prompt_embeds"));
  test::expect_parity("sdxl negative_pooled_prompt_embeds", c.text_time.text_embeds.slice0(0, 2),
                      g->to_f32("negative_pooled_prompt_embeds"));
  test::expect_parity("sdxl pooled_prompt_embeds", c.text_time.text_embeds.slice0(2, 4),
                      g->to_f32("pooled_prompt_embeds"));
  for (int64_t r = 0; r < 4; ++r)
    for (int k = 0; k < 6; ++k) EXPECT_EQ(c.text_time.time_ids[r * 6 + k], ids[k]);
}

TEST(SdxlPrompts, AnEmptyNegativePromptIsZerosWhenAsked) {
  auto m = tiny_sdxl();
  const SdxlTokenizedPrompts zeros = tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {"a cat"}, {""}, true);
  const SdxlConditioning c = encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), zeros, 0, 1, true,
                                                        sdxl_time_ids({}, 32, 32));
  for (int64_t i = 0; i < c.context.numel() / 2; ++i) ASSERT_EQ(c.context[i], 0.0f) << i;
  for (int64_t i = 0; i < c.text_time.text_embeds.numel() / 2; ++i) ASSERT_EQ(c.text_time.text_embeds[i], 0.0f) << i;
  // Not asked: the empty prompt's encodings (nothing of it is zero).
  const SdxlTokenizedPrompts empty = tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {"a cat"}, {""}, false);
  const SdxlConditioning e = encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), empty, 0, 1, true,
                                                        sdxl_time_ids({}, 32, 32));
  EXPECT_NE(e.text_time.text_embeds[0], 0.0f);
  EXPECT_TRUE(sdxl_zeros_for_empty_negative(*m, Compat::Flax));
}

TEST(SdxlPrompts, TimeIds) {
  EXPECT_EQ(sdxl_time_ids({}, 1024, 768), (std::array<float, 6>{1024, 768, 0, 0, 1024, 768}));  // Flax's
  SdxlSizeConditioning s;
  s.original_height = 48;
  s.original_width = 40;
  s.crop_top = 4;
  s.crop_left = 8;
  EXPECT_EQ(sdxl_time_ids(s, 32, 32), (std::array<float, 6>{48, 40, 4, 8, 32, 32}));
  s.crop_left = -1;
  EXPECT_THROW(sdxl_time_ids(s, 32, 32), Error);
}

class SdxlPipelineParity : public ::testing::TestWithParam<const char*> {};

TEST_P(SdxlPipelineParity, MatchesDiffusers) {
  const std::string name = GetParam();
  auto g = pipeline_golden();
  ShardedPipeline pipe(tiny_sdxl());
  const bool nocfg = name == "nocfg";
  GenerationRequest req = golden_request(*g, name == "cfg" || name == "micro", nocfg ? 1.0 : settings()["guidance"].get<double>());
  if (name == "micro") {
    const nlohmann::json all = settings();
    const nlohmann::json& micro = all["micro"];
    req.sdxl_size.original_height = micro["original_size"][0].get<int>();
    req.sdxl_size.original_width = micro["original_size"][1].get<int>();
    req.sdxl_size.crop_top = micro["crops_coords_top_left"][0].get<int>();
    req.sdxl_size.crop_left = micro["crops_coords_top_left"][1].get<int>();
    req.sdxl_size.target_height = micro["target_size"][0].get<int>();
    req.sdxl_size.target_width = micro["target_size"][1].get<int>();
  }
  const GenerationResult res = pipe.run(req);  // the model's Euler, at its default 32 × 32
  EXPECT_EQ(res.signature.scheduler, SchedulerKind::Euler);
  EXPECT_EQ(res.signature.guidance, !nocfg);
  EXPECT_EQ(res.signature.height, 32);
  expect_run_matches(res, *g, name);
  if (name == "cfg")  // output_type="latent": the last step's latents, not unscaled
    test::expect_parity("sdxl pipeline output_type=latent", res.final_latents.reshaped({2, 4, 16, 16}),
                        g->to_f32("cfg.latents_output"));
}

INSTANTIATE_TEST_SUITE_P(Cases, SdxlPipelineParity, ::testing::Values("cfg", "zero_negative", "micro", "nocfg"));

TEST(SdxlPipeline, OneDeviceWithBatchTwoMatchesToo) {
  auto g = pipeline_golden();
  ShardedPipeline pipe(tiny_sdxl());
  GenerationRequest req = golden_request(*g, true, settings()["guidance"].get<double>());
  req.devices = 1;
  req.batch_per_device = 2;
  req.latents = g->to_f32("latents_init").reshaped({1, 2, 4, 16, 16});
  expect_run_matches(pipe.run(req), *g, "cfg");
}

TEST(SdxlPipeline, RefusesWhatItDoesNotSupport) {
  ShardedPipeline pipe(tiny_sdxl());
  GenerationRequest req;
  req.prompts = {"a cat"};
  req.steps = 1;
  req.sdxl_size.crop_top = 8;  // a diffusers option, refused under Flax
  EXPECT_THROW(pipe.resolve(req), Error);
  req.sdxl_size = {};
  ShardedPipeline sd(StableDiffusionModel::load(test::tiny_sd_dir()));
  GenerationRequest sd_req;
  sd_req.prompts = {"a cat"};
  sd_req.compat = Compat::Diffusers;
  sd_req.sdxl_size.original_height = 64;  // not an SDXL model
  EXPECT_THROW(sd.resolve(sd_req), Error);
}

TEST(SdxlPipeline, FlaxModeMatchesDiffusersZeroNegativeUpToTheSchedulersSigmas) {
  // The Flax SDXL pipeline without neg_prompt_ids: zero negative embeddings and pooled embeddings,
  // time ids (h, w, 0, 0, h, w). Its Euler (leading, +1) runs diffusers' timesteps 801 … 1 but
  // starts from latents × the largest training sigma's init_noise_sigma instead of the schedule's,
  // and interpolates its sigmas in float32: given latents rescaled by the ratio of the two, the
  // run must land on diffusers' zero-negative golden up to those roundings (and the `flax`
  // numerics flavour): measured 4.1e-4 on latents of scale 22.6 and 1.1e-5 on the images, within
  // the parity bar.
  auto m = tiny_sdxl();
  auto g = pipeline_golden();
  const int steps = settings()["steps"].get<int>();
  auto init_sigma = [&](SchedulerSemantics semantics) {
    auto s = Scheduler::create(SchedulerKind::Euler, m->scheduler_config(SchedulerKind::Euler), semantics);
    return static_cast<float>(s->init_noise_sigma(s->set_timesteps(steps)));
  };
  const float ratio = init_sigma(SchedulerSemantics::Diffusers) / init_sigma(SchedulerSemantics::Flax);
  std::printf("[sdxl flax] init_noise_sigma diffusers/flax = %.6f\n", ratio);
  ShardedPipeline pipe(m);
  GenerationRequest req = golden_request(*g, false, settings()["guidance"].get<double>());
  req.compat = Compat::Flax;
  Tensor latents = g->to_f32("latents_init").reshaped({2, 1, 4, 16, 16});
  for (float& v : latents) v *= ratio;
  req.latents = latents;
  const GenerationResult res = pipe.run(req);
  EXPECT_TRUE(res.signature.guidance);
  const Tensor steps_ref = g->to_f32("zero_negative.latents_steps");
  test::expect_parity("sdxl flax-mode final latents vs diffusers zero_negative",
                      res.final_latents.reshaped({2, 4, 16, 16}),
                      steps_ref.slice0(steps_ref.dim(0) - 1, steps_ref.dim(0)).reshaped({2, 4, 16, 16}));
  test::expect_parity("sdxl flax-mode images vs diffusers zero_negative", res.images.reshaped({2, 32, 32, 3}),
                      g->to_f32("zero_negative.images"));
}

TEST(SdxlSingleFileParts, SdxlConfigsAndBothTokenizers) {
  // The tiny single file (tests/data/tiny-sdxl/single_file) read as a full-size SDXL base would be:
  // configs are not in single files, so its parts carry SDXL base's (the tiny weights do not fit
  // them; models/sdxl_single_file_test.cpp loads them with the tiny configs).
  const fs::path dir = test::temp_dir("sdxl_single_file_parts");
  fs::copy_file(sdxl_dir() / "single_file" / "tiny_sdxl.safetensors", dir / "model.safetensors");
  fs::copy(sdxl_dir() / "tokenizer", dir / "tokenizer", fs::copy_options::recursive);
  try {
    load_single_file_parts(dir / "model.safetensors", {});
    FAIL() << "an SDXL single file without tokenizer_2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_2"), std::string::npos) << e.what();
  }
  fs::copy(sdxl_dir() / "tokenizer_2", dir / "tokenizer_2", fs::copy_options::recursive);
  const SingleFileParts parts = load_single_file_parts(dir / "model.safetensors", {});
  EXPECT_NE(parts.description.find("SDXL"), std::string::npos) << parts.description;
  ASSERT_TRUE(parts.text_encoder_2);
  EXPECT_TRUE(parts.text_encoder_2->has("text_projection.weight"));
  EXPECT_EQ(parts.tokenizer_2_dir, dir / "tokenizer_2");
  EXPECT_TRUE(parts.unet_config.text_time());
  EXPECT_EQ(parts.unet_config.cross_attention_dim, 2048);
  EXPECT_EQ(parts.text_2_config.projection_dim, 1280);
  EXPECT_DOUBLE_EQ(parts.vae_config.scaling_factor, 0.13025);
  EXPECT_EQ(scheduler_config_class_name(parts.scheduler_json).value_or(""), "EulerDiscreteScheduler");
}
