// DPM++ 2M SDE through the whole pipeline: text to image against diffusers' StableDiffusionPipeline
// with DPMSolverMultistepScheduler(algorithm_type="sde-dpmsolver++"), its noise injected
// (tests/data/sde-dpmsolver/pipeline.safetensors, tools/goldens/make_sde_goldens.py: tiny-sd's
// pipeline goldens' embeddings, latents and settings), with and without Karras sigmas; the noise
// drawn from the device keys by the documented rule otherwise; a model folder whose configuration
// asks for it; the metadata both ways (A1111's "DPM++ 2M SDE", "DPM++ 2M SDE Karras").
#include <gtest/gtest.h>

#include "golden_requests.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_sd() {
  return test::shared_tiny_sd();
}

std::shared_ptr<SafetensorsFile> goldens() {
  static auto g = SafetensorsFile::open(test::data_dir() / "sde-dpmsolver" / "pipeline.safetensors");
  return g;
}

constexpr int kSteps = 5;

// tiny-sd's pipeline goldens' request (two prompts, their negative prompt, guidance 7.5, the
// injected initial latents, --compat diffusers), 5 steps of DPM++ 2M SDE with diffusers' noise.
GenerationRequest golden_request(const std::string& variant) {
  GenerationRequest req = test::tiny_sd_pipeline_request(SchedulerKind::DpmSolverSde);
  req.karras_sigmas = variant == "sde_karras";
  req.step_noise = test::step_noise_per_device(goldens()->to_f32(variant + ".noise"), kSteps, kSteps);
  return req;
}

void expect_matches_golden(const std::string& variant, const GenerationResult& res) {
  test::expect_tiny_sd_pipeline_golden("sde pipeline", res, *goldens(), variant);
}

}  // namespace

TEST(SdePipeline, MatchesDiffusersWithItsNoise) {
  ShardedPipeline pipe(tiny_sd());
  for (const std::string variant : {"sde", "sde_karras"}) {
    const GenerationResult res = pipe.run(golden_request(variant));
    EXPECT_EQ(res.signature.scheduler, SchedulerKind::DpmSolverSde);
    EXPECT_EQ(res.signature.karras_sigmas, variant == "sde_karras");
    EXPECT_EQ(res.model_calls, kSteps);
    expect_matches_golden(variant, res);
  }
}

// diffusers has no Flax SDE solver: --compat flax runs the torch class's schedule too (the Flax
// UNet's numerics stay, within the bar as for Karras sigmas).
TEST(SdePipeline, CompatFlaxRunsTheTorchSchedule) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req = golden_request("sde");
  req.compat = Compat::Flax;
  expect_matches_golden("sde", pipe.run(req));
}

// Without injected noise, step i on device d draws normal(fold_in(key_d, i)) (schedulers/scheduler.h):
// injecting exactly that changes nothing, nor does the thread count; other noise, other images.
TEST(SdePipeline, NoiseIsDrawnFromTheDeviceKeysByTheDocumentedRule) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req = golden_request("sde");
  req.step_noise.reset();
  req.latents.reset();
  req.seed = 77;
  req.threads = 1;
  const GenerationResult drawn = pipe.run(req);
  req.step_noise = test::step_noise_by_rule(drawn.device_keys, kSteps, 4, 32, 32, req.rng);
  req.threads = 2;
  EXPECT_EQ(test::diff(pipe.run(req).images, drawn.images).max_abs, 0.0);
  for (float& v : *req.step_noise) v = -v;
  EXPECT_GT(test::diff(pipe.run(req).images, drawn.images).max_abs, 1e-3);
}

// A diffusers folder whose scheduler_config.json says sde-dpmsolver++ (DPM++ 2M SDE community
// configurations) runs it by default — it used to be refused — and a request may pick DPM++ 2M.
TEST(SdePipeline, AModelFoldersSdeConfigurationIsItsOwnScheduler) {
  auto model = StableDiffusionModel::load(test::tiny_sd_with_scheduler(
      "sde_own", R"({"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
        "set_alpha_to_one": false, "steps_offset": 1, "algorithm_type": "sde-dpmsolver++",
        "use_karras_sigmas": true, "timestep_spacing": "linspace"})"));
  EXPECT_EQ(model->default_scheduler(), SchedulerKind::DpmSolverSde);
  EXPECT_TRUE(model->default_scheduler_has_karras_sigmas());
  ShardedPipeline pipe(model);
  GenerationRequest req = golden_request("sde_karras");
  req.scheduler.reset();
  req.karras_sigmas.reset();
  const GenerationResult own = pipe.run(req);
  EXPECT_EQ(own.signature.scheduler, SchedulerKind::DpmSolverSde);
  expect_matches_golden("sde_karras", own);
  // Plain DPM++ 2M on the same folder: the ODE solver with the file's other settings.
  req.scheduler = SchedulerKind::DpmSolverPP;
  req.step_noise.reset();
  const GenerationResult ode = pipe.run(req);
  EXPECT_EQ(ode.signature.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_GT(test::diff(ode.images, own.images).max_abs, 1e-3);
}

// "Sampler: DPM++ 2M SDE" / "DPM++ 2M SDE Karras" (A1111's names) and JSON "dpm++-sde"; a reopened
// image remakes itself bit for bit (its noise comes from the seed).
TEST(SdePipeline, MetadataCarriesItBothWays) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 3;
  req.scheduler = SchedulerKind::DpmSolverSde;
  for (bool karras : {false, true}) {
    req.karras_sigmas = karras;
    const GenerationResult result = pipe.run(req);
    const ImageMetadata meta = describe_image(req, result, *tiny_sd(), 0, 0);
    const std::string text = a1111_parameters(meta);
    std::printf("[parameters] %s\n", text.c_str());
    EXPECT_NE(text.find(karras ? "Sampler: DPM++ 2M SDE Karras," : "Sampler: DPM++ 2M SDE,"),
              std::string::npos);
    EXPECT_NE(metadata_json(meta).find("\"dpm++-sde\""), std::string::npos) << metadata_json(meta);
    for (const auto& texts : {png_texts(meta), std::vector<PngText>{{"parameters", text}}}) {
      const auto back = parse_png_metadata(texts);
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(back->scheduler, SchedulerKind::DpmSolverSde);
      EXPECT_EQ(back->karras_sigmas, std::optional(karras));
      EXPECT_TRUE(back->not_applied.empty());
      const GenerationResult again = pipe.run(request_from_metadata(*back));
      EXPECT_EQ(test::diff(again.images, result.images).max_abs, 0.0);
    }
  }
}
