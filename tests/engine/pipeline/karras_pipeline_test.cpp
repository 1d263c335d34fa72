// Karras sigmas through the whole pipeline: text to image with LMS, Euler and DPM++ 2M Karras
// against diffusers' StableDiffusionPipeline with the same schedulers
// (tests/data/karras-sigmas/pipeline.safetensors, tools/goldens/make_karras_goldens.py: tiny-sd's
// pipeline goldens' embeddings, latents and settings); the model's own configuration asking for
// them; --compat flax; refusal for the schedulers without them; the metadata both ways.
#include <gtest/gtest.h>

#include "core/error.h"
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
  static auto g = SafetensorsFile::open(test::data_dir() / "karras-sigmas" / "pipeline.safetensors");
  return g;
}

// tiny-sd's pipeline goldens' request: two prompts, their negative prompt, 5 steps, guidance 7.5,
// the injected initial latents, --compat diffusers.
GenerationRequest golden_request(SchedulerKind kind) {
  GenerationRequest req = test::tiny_sd_pipeline_request(kind);
  req.karras_sigmas = true;
  return req;
}

struct Case {
  const char* golden;
  SchedulerKind kind;
};
const Case kCases[] = {
    {"lms", SchedulerKind::Lms}, {"dpmpp2m", SchedulerKind::DpmSolverPP}, {"euler", SchedulerKind::Euler}};

void expect_matches_golden(const std::string& name, const GenerationResult& res) {
  test::expect_tiny_sd_pipeline_golden("karras pipeline", res, *goldens(), name);
}

}  // namespace

TEST(KarrasPipeline, MatchesDiffusersForEveryScheduler) {
  ShardedPipeline pipe(tiny_sd());
  for (const Case& c : kCases) {
    const GenerationResult res = pipe.run(golden_request(c.kind));
    EXPECT_TRUE(res.signature.karras_sigmas) << c.golden;
    EXPECT_NE(res.signature.str().find(" karras"), std::string::npos) << res.signature.str();
    EXPECT_EQ(
        res.model_calls,
        static_cast<int>(goldens()->to_f64(goldens()->get(std::string(c.golden) + ".timesteps")).size()));
    expect_matches_golden(c.golden, res);
  }
}

// The Flax pipeline has no Karras sigmas: --compat flax runs the torch classes' schedule too. Its
// UNet keeps Flax's numerics (tanh GELU in GEGLU, LayerNorm eps 1e-5: models/numerics.h), which
// here move the final latents by 2.2–2.8e-3 (scale 61) and the images by 3.5e-5 — within the bar.
TEST(KarrasPipeline, CompatFlaxRunsTheTorchSchedule) {
  ShardedPipeline pipe(tiny_sd());
  for (const Case& c : kCases) {
    GenerationRequest req = golden_request(c.kind);
    req.compat = Compat::Flax;
    const GenerationResult res = pipe.run(req);
    EXPECT_TRUE(res.signature.karras_sigmas);
    expect_matches_golden(std::string(c.golden), res);
  }
}

// A diffusers folder whose scheduler_config.json asks for them (as many community models' DPM++
// configurations do) runs with them by default; the request turns them off.
TEST(KarrasPipeline, TheModelsOwnConfigurationTurnsThemOnAndTheRequestOff) {
  auto model = StableDiffusionModel::load(test::tiny_sd_with_scheduler(
      "karras_own", R"({"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
        "set_alpha_to_one": false, "steps_offset": 1, "use_karras_sigmas": true, "timestep_spacing": "linspace"})"));
  EXPECT_EQ(model->default_scheduler(), SchedulerKind::DpmSolverPP);
  EXPECT_TRUE(model->default_scheduler_has_karras_sigmas());
  ShardedPipeline pipe(model);
  GenerationRequest req = golden_request(SchedulerKind::DpmSolverPP);
  req.scheduler.reset();
  req.karras_sigmas.reset();
  const GenerationResult own = pipe.run(req);
  EXPECT_EQ(own.signature.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_TRUE(own.signature.karras_sigmas);
  expect_matches_golden("dpmpp2m", own);
  req.karras_sigmas = false;
  const GenerationResult off = pipe.run(req);
  EXPECT_FALSE(off.signature.karras_sigmas);
  // Without them: tiny-sd's own DPM-Solver++ golden (the same run with uniform sigmas).
  test::expect_close_abs("karras off: dpmpp2m images", off.images.reshaped({2, 64, 64, 3}),
                         SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors")
                             ->to_f32("dpmpp2m.images"),
                         1e-3);
  // Another scheduler ignores the key, as diffusers' classes without the option do.
  req.scheduler = SchedulerKind::Pndm;
  req.karras_sigmas.reset();
  EXPECT_FALSE(pipe.resolve(req).signature.karras_sigmas);
}

TEST(KarrasPipeline, SchedulersWithoutThemAreAClearErrorBeforeAnyWork) {
  ShardedPipeline pipe(tiny_sd());
  for (SchedulerKind kind :
       {SchedulerKind::Pndm, SchedulerKind::Ddim, SchedulerKind::EulerAncestral, SchedulerKind::Lcm}) {
    GenerationRequest req = golden_request(kind);
    try {
      pipe.resolve(req);
      ADD_FAILURE() << scheduler_name(kind) << " accepted Karras sigmas";
    } catch (const Error& e) {
      std::printf("[refused] %s\n", e.what());
      EXPECT_NE(
          std::string(e.what()).find("Karras sigmas need the lms, euler, dpm++ or dpm++-sde scheduler, not " +
                                     scheduler_name(kind)),
          std::string::npos)
          << e.what();
    }
    req.karras_sigmas = false;  // off is what they do anyway
    EXPECT_NO_THROW(pipe.resolve(req)) << scheduler_name(kind);
  }
}

// "Sampler: DPM++ 2M Karras" (A1111's name, which A1111 and civitai read) and JSON karras_sigmas;
// a reopened image remakes itself bit for bit.
TEST(KarrasPipeline, MetadataCarriesThemBothWays) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 3;
  req.scheduler = SchedulerKind::DpmSolverPP;
  req.karras_sigmas = true;
  const GenerationResult result = pipe.run(req);
  const ImageMetadata meta = describe_image(req, result, *tiny_sd(), 0, 0);
  const std::string text = a1111_parameters(meta);
  std::printf("[parameters] %s\n", text.c_str());
  EXPECT_NE(text.find("Sampler: DPM++ 2M Karras,"), std::string::npos);
  EXPECT_NE(metadata_json(meta).find("\"karras_sigmas\":true"), std::string::npos);
  for (const auto& texts : {png_texts(meta), std::vector<PngText>{{"parameters", text}}}) {
    const auto back = parse_png_metadata(texts);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->karras_sigmas, std::optional(true));
    const GenerationResult again = pipe.run(request_from_metadata(*back));
    EXPECT_EQ(test::diff(again.images, result.images).max_abs, 0.0);
  }
  req.karras_sigmas = false;
  const ImageMetadata plain = describe_image(req, pipe.run(req), *tiny_sd(), 0, 0);
  EXPECT_NE(a1111_parameters(plain).find("Sampler: DPM++ 2M,"), std::string::npos);
  EXPECT_EQ(plain.karras_sigmas, std::optional(false));
  req.scheduler = SchedulerKind::Pndm;
  req.karras_sigmas.reset();
  EXPECT_FALSE(describe_image(req, pipe.run(req), *tiny_sd(), 0, 0).karras_sigmas.has_value());
}

// Euler's own sigma bounds are read only by Karras sigmas: a file's unusable bound is refused when
// a request turns them on, before any work, and ignored otherwise (as diffusers does).
TEST(KarrasPipeline, EulersOwnBoundsAreCheckedWhenARequestAsksForKarrasSigmas) {
  auto model = StableDiffusionModel::load(test::tiny_sd_with_scheduler(
      "karras_bounds", R"({"_class_name": "EulerDiscreteScheduler", "beta_schedule": "scaled_linear",
        "beta_start": 0.00085, "beta_end": 0.012, "sigma_min": 0, "sigma_max": null})"));
  ShardedPipeline pipe(model);
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 2;
  EXPECT_FALSE(pipe.resolve(req).signature.karras_sigmas);
  req.karras_sigmas = true;
  try {
    pipe.resolve(req);
    ADD_FAILURE() << "sigma_min 0 accepted for Karras sigmas";
  } catch (const Error& e) {
    std::printf("[refused] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("sigma_min and sigma_max must be positive numbers (got 0)"),
              std::string::npos)
        << e.what();
  }
}
