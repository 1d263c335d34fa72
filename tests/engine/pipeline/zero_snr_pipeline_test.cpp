// Zero terminal SNR and guidance rescale through the whole pipeline, against diffusers'
// StableDiffusionPipeline (tests/data/zero-snr/pipeline.safetensors, tools/goldens/
// make_zero_snr_goldens.py: tiny-sd's pipeline goldens' embeddings, latents and settings): a model
// folder configured as zero-SNR models are (rescale_betas_zero_snr, v_prediction, trailing) with
// Euler and guidance_rescale 0.7, with DDIM, and guidance_rescale alone; the request's overrides;
// what is refused; the metadata both ways (A1111's "Noise Schedule", "CFG Rescale phi").
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "golden_requests.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "pipeline/single_file_model.h"
#include "test_support.h"
#include "tiny_single_file.h"

using namespace octodiff;

namespace {

std::shared_ptr<SafetensorsFile> goldens() {
  static auto g = SafetensorsFile::open(test::data_dir() / "zero-snr" / "pipeline.safetensors");
  return g;
}

// tiny-sd's scheduler configuration as class `cls` with `keys` added: what the goldens ran.
std::string tiny_sd_config_as(const std::string& cls, const std::string& keys) {
  return R"({"_class_name": ")" + cls + R"(", "beta_end": 0.012, "beta_schedule": "scaled_linear",
    "beta_start": 0.00085, "clip_sample": false, "num_train_timesteps": 1000, "set_alpha_to_one": false,
    "skip_prk_steps": true, "steps_offset": 1, "trained_betas": null)" +
         keys + "}";
}
const char* kZeroSnrV =
    R"(, "rescale_betas_zero_snr": true, "prediction_type": "v_prediction", "timestep_spacing": "trailing")";

std::shared_ptr<const StableDiffusionModel> zero_snr_model(const std::string& cls) {
  return StableDiffusionModel::load(
      test::tiny_sd_with_scheduler("zero_snr_" + cls, tiny_sd_config_as(cls, kZeroSnrV)));
}

// tiny-sd's pipeline goldens' request (two prompts, guidance 7.5, the injected latents, --compat
// diffusers), 5 steps, the model's own scheduler, guidance rescale φ.
GenerationRequest golden_request(double phi) {
  GenerationRequest req = test::tiny_sd_pipeline_request(SchedulerKind::Pndm);
  req.scheduler.reset();
  req.guidance_rescale = phi;
  return req;
}

void expect_matches_golden(const std::string& run, const GenerationResult& res) {
  test::expect_tiny_sd_pipeline_golden("zero-snr pipeline", res, *goldens(), run);
}

}  // namespace

TEST(ZeroSnrPipeline, AZeroSnrFolderMatchesDiffusers) {
  for (const auto& [cls, run, phi] : {std::tuple{"EulerDiscreteScheduler", "euler_zero_snr_rescaled", 0.7},
                                      std::tuple{"DDIMScheduler", "ddim_zero_snr", 0.0}}) {
    auto model = zero_snr_model(cls);
    ShardedPipeline pipe(model);
    const GenerationResult res = pipe.run(golden_request(phi));
    EXPECT_TRUE(res.signature.zero_snr) << run;
    EXPECT_EQ(res.signature.timestep_spacing, TimestepSpacing::Trailing) << run;
    expect_matches_golden(run, res);
  }
}

TEST(ZeroSnrPipeline, GuidanceRescaleAloneMatchesDiffusers) {
  ShardedPipeline pipe(test::shared_tiny_sd());
  GenerationRequest req = golden_request(0.7);
  req.scheduler = SchedulerKind::Ddim;
  const GenerationResult res = pipe.run(req);
  EXPECT_FALSE(res.signature.zero_snr);
  expect_matches_golden("ddim_rescaled", res);
  // And it changes the images: φ = 0 is the plain DDIM run.
  req.guidance_rescale = 0;
  EXPECT_GT(test::diff(pipe.run(req).images, res.images).max_abs, 1e-3);
}

// The Flax pipelines have neither: --compat flax runs the torch schedule and the rescale too (the
// Flax UNet's numerics stay, within the bar as for Karras sigmas).
TEST(ZeroSnrPipeline, CompatFlaxRunsThemToo) {
  ShardedPipeline pipe(zero_snr_model("EulerDiscreteScheduler"));
  GenerationRequest req = golden_request(0.7);
  req.compat = Compat::Flax;
  expect_matches_golden("euler_zero_snr_rescaled", pipe.run(req));
}

// --zero-snr on a plain folder = the same folder configured with rescale_betas_zero_snr; off on a
// zero-SNR folder = the plain schedule.
TEST(ZeroSnrPipeline, TheRequestOverridesTheConfiguration) {
  const char* kZeroSnrEps = R"(, "rescale_betas_zero_snr": true, "timestep_spacing": "trailing")";
  auto configured = StableDiffusionModel::load(
      test::tiny_sd_with_scheduler("zero_snr_eps", tiny_sd_config_as("EulerDiscreteScheduler", kZeroSnrEps)));
  auto plain = StableDiffusionModel::load(test::tiny_sd_with_scheduler(
      "euler_trailing", tiny_sd_config_as("EulerDiscreteScheduler", R"(, "timestep_spacing": "trailing")")));
  ShardedPipeline on_configured(configured), on_plain(plain);
  GenerationRequest req = golden_request(0.0);
  const GenerationResult own = on_configured.run(req);
  EXPECT_TRUE(own.signature.zero_snr);
  req.zero_snr = true;
  const GenerationResult asked = on_plain.run(req);
  EXPECT_TRUE(asked.signature.zero_snr);
  EXPECT_EQ(test::diff(asked.images, own.images).max_abs, 0.0);
  req.zero_snr = false;
  const GenerationResult off = on_configured.run(req);
  EXPECT_FALSE(off.signature.zero_snr);
  req.zero_snr.reset();
  EXPECT_EQ(test::diff(off.images, on_plain.run(req).images).max_abs, 0.0);
  EXPECT_GT(test::diff(off.images, own.images).max_abs, 1e-3);
}

TEST(ZeroSnrPipeline, WhatCannotRunIsRefusedWithAReason) {
  ShardedPipeline pipe(test::shared_tiny_sd());
  GenerationRequest req = golden_request(0.0);
  req.zero_snr = true;
  for (SchedulerKind kind : {SchedulerKind::Pndm, SchedulerKind::Lms}) {
    req.scheduler = kind;
    test::expect_error_mentioning([&] { pipe.run(req); }, "zero terminal SNR needs the ddim, euler");
  }
  // tiny-sd predicts epsilon: DDIM cannot start at the timestep with no signal left.
  req.scheduler = SchedulerKind::Ddim;
  req.timestep_spacing = TimestepSpacing::Trailing;
  test::expect_error_mentioning([&] { pipe.run(req); }, "has no signal left");
  req.zero_snr.reset();
  for (double phi : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    req.guidance_rescale = phi;
    test::expect_error_mentioning([&] { pipe.run(req); }, "guidance rescale must lie in [0, 1]");
  }
}

// φ rescales classifier-free guidance: a one-pass run (guidance ≤ 1) has none to rescale.
TEST(ZeroSnrPipeline, GuidanceRescaleNeedsGuidance) {
  ShardedPipeline pipe(test::shared_tiny_sd());
  GenerationRequest req = golden_request(0.0);
  req.scheduler = SchedulerKind::Euler;
  req.guidance_scale = 1.0;
  const GenerationResult plain = pipe.run(req);
  req.guidance_rescale = 0.7;
  EXPECT_EQ(test::diff(pipe.run(req).images, plain.images).max_abs, 0.0);
}

// "Noise Schedule: Zero Terminal SNR" / "Default" (A1111's key, written when it was on or the
// model's own has it) and "CFG Rescale phi: 0.7"; JSON "zero_snr", "guidance_rescale"; a reopened
// image remakes itself bit for bit, whichever way the schedule went.
TEST(ZeroSnrPipeline, MetadataCarriesThemBothWays) {
  auto model = zero_snr_model("EulerAncestralDiscreteScheduler");
  ShardedPipeline pipe(model);
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 3;
  req.guidance_rescale = 0.7;
  for (bool zero_snr : {true, false}) {
    req.zero_snr = zero_snr;
    const GenerationResult result = pipe.run(req);
    const ImageMetadata meta = describe_image(req, result, *model, 0, 0);
    const std::string text = a1111_parameters(meta);
    std::printf("[parameters] %s\n", text.c_str());
    EXPECT_NE(text.find(zero_snr ? "Noise Schedule: Zero Terminal SNR" : "Noise Schedule: Default"),
              std::string::npos);
    EXPECT_NE(text.find("CFG Rescale phi: 0.7"), std::string::npos);
    EXPECT_NE(metadata_json(meta).find(zero_snr ? "\"zero_snr\":true" : "\"zero_snr\":false"),
              std::string::npos)
        << metadata_json(meta);
    for (const auto& texts : {png_texts(meta), std::vector<PngText>{{"parameters", text}}}) {
      const auto back = parse_png_metadata(texts);
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(back->zero_snr, std::optional(zero_snr));
      EXPECT_EQ(back->guidance_rescale, 0.7);
      EXPECT_TRUE(back->not_applied.empty());
      const GenerationResult again = pipe.run(request_from_metadata(*back));
      EXPECT_EQ(test::diff(again.images, result.images).max_abs, 0.0);
    }
  }
  // On tiny-sd (no zero SNR of its own) a run without it says nothing of noise schedules.
  req.zero_snr.reset();
  req.guidance_rescale = 0;
  ShardedPipeline plain(test::shared_tiny_sd());
  const std::string text =
      a1111_parameters(describe_image(req, plain.run(req), *test::shared_tiny_sd(), 0, 0));
  EXPECT_EQ(text.find("Noise Schedule"), std::string::npos) << text;
  EXPECT_EQ(text.find("CFG Rescale"), std::string::npos) << text;
}

// An A1111 image with zero terminal SNR and a sampler that has none here: said, not applied.
TEST(ZeroSnrPipeline, AnA1111NoiseScheduleThatCannotApplyIsSaid) {
  const auto m = parse_png_metadata(
      {{"parameters",
        "a cat\nSteps: 20, Sampler: PNDM, CFG scale: 7, Seed: 1, Size: 64x64, Noise Schedule: Zero "
        "Terminal SNR, CFG Rescale phi: 0.5"}});
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->zero_snr.has_value());
  EXPECT_EQ(m->guidance_rescale, 0.5);
  int said = 0;
  for (const std::string& note : m->not_applied) {
    std::printf("[not applied] %s\n", note.c_str());
    said +=
        note.find("zero terminal SNR is not applied: the sampler 'PNDM' has none here") != std::string::npos;
  }
  EXPECT_EQ(said, 1);
}

// A single-file checkpoint with the v_pred and ztsnr markers gets Euler with zero terminal SNR,
// v-prediction and trailing timesteps as its own scheduler (PNDM, the single-file default, has no
// zero SNR); v_pred alone keeps PNDM with v-prediction.
TEST(ZeroSnrPipeline, AMarkedSingleFileCheckpointGetsItsSchedule) {
  using Family = SingleFileCheckpoint::Family;
  const auto dir = test::temp_dir("zero_snr_single_file");
  const auto marker = [](const char* name) {
    return TensorToWrite{name, DType::F32, {0}, [](uint8_t*, size_t) {}};
  };
  ModelLoadOptions options;
  options.tokenizer_dir = test::tiny_sd_dir() / "tokenizer";
  for (bool ztsnr : {true, false}) {
    SingleFileContents contents = test::tiny_sd_single_file_contents(Family::SD1);
    contents.extra = {marker("v_pred")};
    if (ztsnr) contents.extra.push_back(marker("ztsnr"));
    const auto path = dir / (ztsnr ? "vpred-ztsnr.safetensors" : "vpred.safetensors");
    write_single_file(path, contents, DType::F32);
    const SingleFileParts parts = load_single_file_parts(path, options);
    std::printf("[single file] %s: %s\n", path.filename().c_str(), parts.description.c_str());
    const SchedulerKind kind = *scheduler_config_kind(parts.scheduler_json);
    EXPECT_EQ(kind, ztsnr ? SchedulerKind::Euler : SchedulerKind::Pndm);
    const SchedulerConfig config = SchedulerConfig::from_json(parts.scheduler_json, kind);
    EXPECT_EQ(config.prediction_type, PredictionType::VPrediction);
    EXPECT_EQ(config.rescale_betas_zero_snr, ztsnr);
    EXPECT_EQ(config.timestep_spacing, ztsnr ? TimestepSpacing::Trailing : TimestepSpacing::Leading);
    EXPECT_EQ(parts.description.find("zero terminal SNR") != std::string::npos, ztsnr) << parts.description;
    EXPECT_NE(parts.description.find("v-prediction"), std::string::npos) << parts.description;
  }
}
