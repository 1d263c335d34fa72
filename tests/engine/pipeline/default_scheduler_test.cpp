// The model's own scheduler: the class a folder's scheduler/scheduler_config.json names is what a
// request without a scheduler runs, configured from that file; a request may override the
// scheduler and the timestep spacing; unknown classes and broken configs are reported clearly.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "io/files.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

// A copy of tiny-sd (without its goldens) whose scheduler_config.json is `scheduler_json`.
std::shared_ptr<const StableDiffusionModel> load(const fs::path& dir) {
  ModelLoadOptions o;
  o.weight_cache = false;
  return StableDiffusionModel::load(dir, o);
}

GenerationRequest request() {
  GenerationRequest r;
  r.prompts = {"a red circle"};
  r.steps = 4;
  return r;
}

// An SD-Turbo-like Euler configuration: trailing spacing, SD betas, its own steps_offset.
const char* kEulerJson = R"({"_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.31.0",
  "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "interpolation_type": "linear",
  "num_train_timesteps": 1000, "prediction_type": "epsilon", "steps_offset": 1, "timestep_spacing": "trailing",
  "trained_betas": null, "use_karras_sigmas": false})";

TEST(DefaultScheduler, TinySdIsPndm) {
  auto m = load(test::tiny_sd_dir());
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Pndm);
  EXPECT_TRUE(m->load_notes().empty());
  ShardedPipeline pipe(m);
  const Signature s = pipe.resolve(request()).signature;
  EXPECT_EQ(s.scheduler, SchedulerKind::Pndm);
  EXPECT_EQ(s.timestep_spacing, TimestepSpacing::Leading);  // PNDM's class default
  std::printf("[signature] %s\n", s.str().c_str());
}

TEST(DefaultScheduler, FolderNamingEulerResolvesToEulerWithItsConfig) {
  auto m = load(test::tiny_sd_with_scheduler("default_sched_euler", kEulerJson));
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Euler);
  const SchedulerConfig c = m->scheduler_config(SchedulerKind::Euler);
  EXPECT_EQ(c.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_EQ(c.steps_offset, 1);
  EXPECT_EQ(c.beta_schedule, "scaled_linear");
  EXPECT_EQ(c.beta_start, 0.00085);

  ShardedPipeline pipe(m);
  const Signature own = pipe.resolve(request()).signature;
  std::printf("[signature] model's own: %s\n", own.str().c_str());
  EXPECT_EQ(own.scheduler, SchedulerKind::Euler);
  EXPECT_EQ(own.timestep_spacing, TimestepSpacing::Trailing);
  EXPECT_NE(own.str().find("euler trailing"), std::string::npos);

  // The request overrides the scheduler (configured from the same file: DDIM keeps its own
  // default spacing only where the file is silent — here the file says trailing).
  GenerationRequest r = request();
  r.scheduler = SchedulerKind::Ddim;
  const Signature ddim = pipe.resolve(r).signature;
  EXPECT_EQ(ddim.scheduler, SchedulerKind::Ddim);
  EXPECT_EQ(ddim.timestep_spacing, TimestepSpacing::Trailing);
  r.timestep_spacing = TimestepSpacing::Linspace;
  const Signature linspace = pipe.resolve(r).signature;
  EXPECT_EQ(linspace.timestep_spacing, TimestepSpacing::Linspace);
  EXPECT_NE(linspace.str(), ddim.str());  // a different plan
  EXPECT_FALSE(linspace == ddim);
}

TEST(DefaultScheduler, RunsTheModelsOwnSchedulerAndSaysSoInTheMetadata) {
  auto m = load(test::tiny_sd_with_scheduler("default_sched_run", kEulerJson));
  ShardedPipeline pipe(m);
  GenerationRequest r = request();
  r.steps = 2;
  r.compat = Compat::Diffusers;
  const GenerationResult own = pipe.run(r);
  EXPECT_EQ(own.signature.scheduler, SchedulerKind::Euler);
  EXPECT_EQ(own.model_calls, 2);
  ImageMetadata meta = describe_image(r, own, *m, 0, 0);
  EXPECT_EQ(meta.scheduler, SchedulerKind::Euler);
  EXPECT_TRUE(meta.scheduler_is_models_own);
  EXPECT_EQ(meta.timestep_spacing, TimestepSpacing::Trailing);
  const std::string a1111 = a1111_parameters(meta);
  std::printf("[parameters] %s\n", a1111.c_str());
  EXPECT_NE(a1111.find("Sampler: Euler, "), std::string::npos);
  EXPECT_NE(a1111.find("Sampler source: model, Timestep spacing: trailing"), std::string::npos);
  // Round trip through the PNG text chunks, and a request that makes the image again.
  auto back = parse_png_metadata(png_texts(meta));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->scheduler, SchedulerKind::Euler);
  EXPECT_TRUE(back->scheduler_is_models_own);
  EXPECT_EQ(back->timestep_spacing, TimestepSpacing::Trailing);
  const GenerationRequest again = request_from_metadata(*back);
  EXPECT_EQ(again.scheduler, SchedulerKind::Euler);
  EXPECT_EQ(again.timestep_spacing, TimestepSpacing::Trailing);

  r.scheduler = SchedulerKind::Ddim;
  const GenerationResult ddim = pipe.run(r);
  EXPECT_EQ(ddim.signature.scheduler, SchedulerKind::Ddim);
  meta = describe_image(r, ddim, *m, 0, 0);
  EXPECT_FALSE(meta.scheduler_is_models_own);
  EXPECT_EQ(a1111_parameters(meta).find("Sampler source"), std::string::npos);
}

TEST(DefaultScheduler, UnknownClassFallsBackToPndmWithANote) {
  auto m = load(test::tiny_sd_with_scheduler(
      "default_sched_unknown",
      R"({"_class_name": "KDPM2DiscreteScheduler", "beta_schedule": "scaled_linear",
                                        "beta_start": 0.00085, "beta_end": 0.012, "steps_offset": 1})"));
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Pndm);
  const auto notes = m->load_notes();
  ASSERT_EQ(notes.size(), 1u);
  std::printf("[note] %s\n", notes[0].c_str());
  EXPECT_NE(notes[0].find("'KDPM2DiscreteScheduler', which Octodiff does not implement"), std::string::npos);
  EXPECT_NE(notes[0].find("scheduler_config.json"), std::string::npos);
  ShardedPipeline pipe(m);
  EXPECT_EQ(pipe.resolve(request()).signature.scheduler, SchedulerKind::Pndm);
}

TEST(DefaultScheduler, NoClassNameOrNoConfigIsPndm) {
  EXPECT_EQ(load(test::tiny_sd_with_scheduler("default_sched_noclass", R"({"steps_offset": 1})"))
                ->default_scheduler(),
            SchedulerKind::Pndm);
  const fs::path dir = test::tiny_sd_with_scheduler("default_sched_nofile", "{}");
  fs::remove_all(dir / "scheduler");
  auto m = load(dir);
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Pndm);
  EXPECT_TRUE(m->load_notes().empty());
}

TEST(DefaultScheduler, BrokenConfigsGetClearErrors) {
  const auto load_error = [](const fs::path& dir) -> std::string {
    try {
      load(dir);
    } catch (const Error& e) {
      std::printf("[load error] %s\n", e.what());
      return e.what();
    }
    return "";
  };
  const std::string truncated =
      load_error(test::tiny_sd_with_scheduler("default_sched_truncated", R"({"_class_name": "Eu)"));
  EXPECT_NE(truncated.find("scheduler_config.json: scheduler config is not valid JSON"), std::string::npos);
  const std::string not_string =
      load_error(test::tiny_sd_with_scheduler("default_sched_notstring", R"({"_class_name": 7})"));
  EXPECT_NE(not_string.find("'_class_name' must be a string"), std::string::npos);

  // A config the class refuses fails when a request resolves, naming the option.
  auto m = load(test::tiny_sd_with_scheduler(
      "default_sched_beta", R"({"_class_name": "EulerDiscreteScheduler", "use_beta_sigmas": true})"));
  EXPECT_EQ(m->default_scheduler(), SchedulerKind::Euler);
  ShardedPipeline pipe(m);
  try {
    pipe.resolve(request());
    ADD_FAILURE() << "use_beta_sigmas accepted";
  } catch (const Error& e) {
    std::printf("[resolve error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("scheduler_config.json: scheduler config: 'use_beta_sigmas' = true"),
              std::string::npos);
  }
}

}  // namespace
