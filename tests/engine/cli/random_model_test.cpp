// `octodiff-cli make-random-model` for the few-step benchmark architectures (lcm-sd15, sd-turbo, taesd):
// full-size weights are GBs, so these tests run it with --configs-only and check what it declares —
// the configs parse with the engine's readers, the parameter catalog of the written UNet config
// has cond_proj, and the scheduler config names the right class with the right settings.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "models/configs.h"
#include "models/parameter_catalog.h"
#include "pipeline/autoencoder_tiny_loader.h"
#include "schedulers/scheduler.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using CliResult = test::CliRun;

CliResult make_random_model(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), "make-random-model");
  return test::run_cli(args, cwd);
}

json read_json(const fs::path& p) { return json::parse(read_text_file(p)); }

// Writes the configs of `arch` into dir/out and checks what every architecture shares.
fs::path configs_of(const std::string& arch, const fs::path& dir) {
  const CliResult r = make_random_model({"--arch", arch, "--layout", "diffusers", "--configs-only", "--out", "out"}, dir);
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  const fs::path out = dir / "out";
  EXPECT_FALSE(fs::exists(out / "unet" / "diffusion_pytorch_model.safetensors")) << "--configs-only wrote weights";
  EXPECT_TRUE(fs::exists(out / "tokenizer" / "vocab.json"));
  EXPECT_NE(read_text_file(out / "README.md").find("no weights"), std::string::npos);
  return out;
}

}  // namespace

TEST(RandomModel, LcmSd15DeclaresAnLcmUNetAndTheLcmScheduler) {
  const fs::path out = configs_of("lcm-sd15", test::temp_dir("random_model_lcm"));
  const UNetConfig unet = UNetConfig::from_json(read_text_file(out / "unet" / "config.json"), "unet/config.json");
  EXPECT_EQ(unet.time_cond_proj_dim, 256);
  EXPECT_EQ(unet.cross_attention_dim, 768);
  EXPECT_EQ(unet.block_out_channels, (std::vector<int>{320, 640, 1280, 1280}));
  const ClipTextConfig text =
      ClipTextConfig::from_json(read_text_file(out / "text_encoder" / "config.json"), "text_encoder");
  EXPECT_EQ(text.hidden_size, 768);

  // The weights the tool would write: SD 1.5's UNet plus cond_proj (256 → 320, no bias).
  const auto specs = unet_parameters(unet);
  UNetConfig sd15 = unet;
  sd15.time_cond_proj_dim = 0;
  EXPECT_EQ(parameter_count(specs), parameter_count(unet_parameters(sd15)) + 256 * 320);
  bool found = false;
  for (const auto& s : specs)
    if (s.name == "time_embedding.cond_proj.weight") found = s.shape == Shape{320, 256};
  EXPECT_TRUE(found) << "no time_embedding.cond_proj.weight (320, 256) in the catalog";

  const json sched = read_json(out / "scheduler" / "scheduler_config.json");
  EXPECT_EQ(sched["_class_name"], "LCMScheduler");
  EXPECT_EQ(sched["original_inference_steps"], 50);
  EXPECT_EQ(sched["beta_schedule"], "scaled_linear");
  EXPECT_EQ(sched["prediction_type"], "epsilon");
  EXPECT_EQ(sched["timestep_scaling"], 10.0);
  const json index = read_json(out / "model_index.json");
  EXPECT_EQ(index["_class_name"], "LatentConsistencyModelPipeline");
  EXPECT_EQ(index["scheduler"], json({"diffusers", "LCMScheduler"}));
}

TEST(RandomModel, SdTurboIsSd21At512WithTrailingEuler) {
  const fs::path out = configs_of("sd-turbo", test::temp_dir("random_model_turbo"));
  const UNetConfig unet = UNetConfig::from_json(read_text_file(out / "unet" / "config.json"), "unet/config.json");
  EXPECT_EQ(unet.sample_size, 64);  // 512 × 512 images
  EXPECT_EQ(unet.cross_attention_dim, 1024);
  EXPECT_EQ(unet.num_heads, (std::vector<int>{5, 10, 20, 20}));
  EXPECT_TRUE(unet.use_linear_projection);
  EXPECT_EQ(unet.time_cond_proj_dim, 0);
  const ClipTextConfig text =
      ClipTextConfig::from_json(read_text_file(out / "text_encoder" / "config.json"), "text_encoder");
  EXPECT_EQ(text.hidden_size, 1024);
  EXPECT_EQ(text.num_hidden_layers, 23);
  EXPECT_EQ(read_json(out / "vae" / "config.json")["sample_size"], 512);

  const std::string sched_text = read_text_file(out / "scheduler" / "scheduler_config.json");
  const json sched = json::parse(sched_text);
  EXPECT_EQ(sched["_class_name"], "EulerDiscreteScheduler");
  const SchedulerConfig c = SchedulerConfig::from_json(sched_text, SchedulerKind::Euler);
  EXPECT_EQ(c.prediction_type, PredictionType::Epsilon);
  EXPECT_EQ(c.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_EQ(c.steps_offset, 1);
  EXPECT_EQ(c.beta_schedule, "scaled_linear");
  EXPECT_DOUBLE_EQ(c.beta_start, 0.00085);
  EXPECT_DOUBLE_EQ(c.beta_end, 0.012);
  const json index = read_json(out / "model_index.json");
  EXPECT_EQ(index["_class_name"], "StableDiffusionPipeline");
  EXPECT_EQ(index["scheduler"], json({"diffusers", "EulerDiscreteScheduler"}));
}

TEST(RandomModel, ExistingArchitecturesKeepTheirSchedulers) {
  const json sd15 = read_json(configs_of("sd15", test::temp_dir("random_model_sd15")) / "scheduler" /
                              "scheduler_config.json");
  EXPECT_EQ(sd15["_class_name"], "PNDMScheduler");
  EXPECT_FALSE(sd15.contains("prediction_type"));
  const json v = read_json(configs_of("sd21", test::temp_dir("random_model_sd21")) / "scheduler" /
                           "scheduler_config.json");
  EXPECT_EQ(v["prediction_type"], "v_prediction");
  const fs::path base = configs_of("sd21-base", test::temp_dir("random_model_sd21_base"));
  EXPECT_EQ(read_json(base / "scheduler" / "scheduler_config.json")["prediction_type"], "epsilon");
  EXPECT_EQ(read_json(base / "unet" / "config.json")["time_cond_proj_dim"], nullptr);
}

// A TAESD is small (2.4 M parameters), so this one is written whole and loaded: the config is
// madebyollin/taesd's, the weights are every tensor AutoencoderTiny::load takes, both halves.
TEST(RandomModel, TaesdIsAFullSizeLoadableTinyAutoencoder) {
  const fs::path dir = test::temp_dir("random_model_taesd");
  const CliResult r = make_random_model({"--arch", "taesd", "--layout", "diffusers", "--out", "taesd"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const fs::path out = dir / "taesd";
  const json config = read_json(out / "config.json");
  EXPECT_EQ(config["_class_name"], "AutoencoderTiny");
  EXPECT_EQ(config["decoder_block_out_channels"], json({64, 64, 64, 64}));
  EXPECT_EQ(config["encoder_block_out_channels"], json({64, 64, 64, 64}));
  EXPECT_EQ(config["num_decoder_blocks"], json({3, 3, 3, 1}));
  EXPECT_EQ(config["num_encoder_blocks"], json({1, 3, 3, 3}));
  EXPECT_EQ(config["latent_channels"], 4);
  EXPECT_EQ(config["scaling_factor"], 1.0);
  EXPECT_FALSE(fs::exists(out / "tokenizer"));

  const auto taesd = load_autoencoder_tiny(out, ComputeDType::F32);
  EXPECT_TRUE(taesd->has_encoder());
  EXPECT_EQ(taesd->config().channels(), 64);
  Tensor latents = Tensor::empty({1, 4, 4, 4});
  for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = static_cast<float>((i % 7) - 3) * 0.5f;
  const Tensor image = taesd->decode_nhwc(latents);
  ASSERT_EQ(image.shape(), (Shape{1, 32, 32, 3}));
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < image.numel(); ++i) lo = std::min(lo, image[i]), hi = std::max(hi, image[i]);
  EXPECT_GE(lo, 0.0f);
  EXPECT_LE(hi, 1.0f);
  EXPECT_LT(lo, hi) << "random weights decoded to a constant image";
}

TEST(RandomModel, RefusesWhatItCannotWrite) {
  const fs::path dir = test::temp_dir("random_model_refusals");
  CliResult r = make_random_model({"--arch", "lcm-sd15", "--layout", "single-file", "--out", "single"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cond_proj"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "single" / "model.safetensors"));
  r = make_random_model({"--arch", "sd3", "--layout", "diffusers", "--out", "x"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("lcm-sd15, sd-turbo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("taesd"), std::string::npos) << r.err;
  r = make_random_model({"--arch", "taesd", "--layout", "single-file", "--out", "t"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("AutoencoderTiny folder only"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "t" / "config.json"));
}

TEST(RandomModel, SdxlDeclaresBothTextTowersAndTheTextTimeUNet) {
  const fs::path out = configs_of("sdxl", test::temp_dir("random_model_sdxl"));
  const UNetConfig unet = UNetConfig::from_json(read_text_file(out / "unet" / "config.json"), "unet/config.json");
  EXPECT_TRUE(unet.text_time());
  EXPECT_EQ(unet.addition_time_embed_dim, 256);
  EXPECT_EQ(unet.projection_class_embeddings_input_dim, 2816);
  EXPECT_EQ(unet.transformer_layers_per_block, (std::vector<int>{1, 2, 10}));
  EXPECT_EQ(unet.num_heads, (std::vector<int>{5, 10, 20}));
  EXPECT_EQ(unet.cross_attention_dim, 2048);
  EXPECT_EQ(unet.sample_size, 128);  // 1024 × 1024 by default
  EXPECT_EQ(parameter_count(unet_parameters(unet)), 2'567'463'684);  // SDXL base's published count
  const ClipTextConfig te1 =
      ClipTextConfig::from_json(read_text_file(out / "text_encoder" / "config.json"), "text_encoder");
  const ClipTextConfig te2 =
      ClipTextConfig::from_json(read_text_file(out / "text_encoder_2" / "config.json"), "text_encoder_2");
  EXPECT_EQ(te1.hidden_size + te2.hidden_size, 2048);
  EXPECT_EQ(te2.projection_dim, 1280);
  EXPECT_EQ(te2.hidden_act, "gelu");
  EXPECT_EQ(read_json(out / "text_encoder_2" / "config.json")["architectures"][0], "CLIPTextModelWithProjection");
  EXPECT_EQ(read_json(out / "tokenizer_2" / "special_tokens_map.json")["pad_token"], "!");
  const json index = read_json(out / "model_index.json");
  EXPECT_EQ(index["_class_name"], "StableDiffusionXLPipeline");
  EXPECT_EQ(index["force_zeros_for_empty_prompt"], true);
  const std::string sched = read_text_file(out / "scheduler" / "scheduler_config.json");
  EXPECT_EQ(scheduler_config_class_name(sched).value_or(""), "EulerDiscreteScheduler");
  EXPECT_EQ(SchedulerConfig::from_json(sched, SchedulerKind::Euler).timestep_spacing, TimestepSpacing::Leading);
  const VaeConfig vae = VaeConfig::from_json(read_text_file(out / "vae" / "config.json"), "vae");
  EXPECT_DOUBLE_EQ(vae.scaling_factor, 0.13025);
  // The single-file layout is written too (full size: 10+ GB, not here; models/
  // sdxl_random_single_file_test.cpp writes a small one through the same functions).
}

// SDXL-Turbo: SDXL's networks at 512 × 512 with stabilityai/sdxl-turbo's scheduler (Euler
// ancestral, trailing timesteps), which a model loaded from the folder takes as its own.
TEST(RandomModel, SdxlTurboIsSdxlAt512WithTrailingEulerAncestral) {
  const fs::path out = configs_of("sdxl-turbo", test::temp_dir("random_model_sdxl_turbo"));
  const UNetConfig unet = UNetConfig::from_json(read_text_file(out / "unet" / "config.json"), "unet/config.json");
  EXPECT_TRUE(unet.text_time());
  EXPECT_EQ(unet.sample_size, 64);  // 512 × 512 images
  EXPECT_EQ(unet.transformer_layers_per_block, (std::vector<int>{1, 2, 10}));
  EXPECT_EQ(unet.cross_attention_dim, 2048);
  EXPECT_EQ(parameter_count(unet_parameters(unet)), 2'567'463'684);  // SDXL's UNet
  EXPECT_EQ(read_json(out / "vae" / "config.json")["sample_size"], 512);
  EXPECT_DOUBLE_EQ(VaeConfig::from_json(read_text_file(out / "vae" / "config.json"), "vae").scaling_factor, 0.13025);
  EXPECT_EQ(read_json(out / "text_encoder_2" / "config.json")["architectures"][0], "CLIPTextModelWithProjection");
  const std::string sched_text = read_text_file(out / "scheduler" / "scheduler_config.json");
  EXPECT_EQ(scheduler_config_class_name(sched_text).value_or(""), "EulerAncestralDiscreteScheduler");
  EXPECT_EQ(scheduler_kind_from_class_name("EulerAncestralDiscreteScheduler"), SchedulerKind::EulerAncestral);
  const SchedulerConfig c = SchedulerConfig::from_json(sched_text, SchedulerKind::EulerAncestral);
  EXPECT_EQ(c.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_EQ(c.prediction_type, PredictionType::Epsilon);
  EXPECT_EQ(c.steps_offset, 1);
  EXPECT_DOUBLE_EQ(c.beta_start, 0.00085);
  EXPECT_DOUBLE_EQ(c.beta_end, 0.012);
  const json index = read_json(out / "model_index.json");
  EXPECT_EQ(index["_class_name"], "StableDiffusionXLPipeline");
  EXPECT_EQ(index["scheduler"], json({"diffusers", "EulerAncestralDiscreteScheduler"}));
  const CliResult r = make_random_model({"--arch", "sdxl-turbo", "--layout", "single-file", "--out", "sf"},
                                        test::temp_dir("random_model_sdxl_turbo_single"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("single-file"), std::string::npos) << r.err;
}
