// The whole text-to-image pipeline against diffusers' StableDiffusionPipeline on the tiny model
// (goldens/pipeline.safetensors): every scheduler, with and without guidance, in --compat diffusers
// with the goldens' injected latents. Images within 1e-3 absolute; latents at the parity bar.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/safetensors.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

nlohmann::json prompts_json() {
  return nlohmann::json::parse(read_text_file(test::tiny_sd_dir() / "goldens" / "prompts.json"));
}

struct Case {
  const char* golden;  // prefix in pipeline.safetensors
  SchedulerKind kind;
  bool cfg;
};

class PipelineParity : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineParity, MatchesDiffusers) {
  const Case c = GetParam();
  auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors");
  auto pj = prompts_json();
  ShardedPipeline pipe(tiny_model());

  GenerationRequest req;
  for (const auto& p : pj["pipeline_prompts"]) req.prompts.push_back(p.get<std::string>());
  if (c.cfg) req.negative_prompts = {pj["pipeline_negative_prompt"].get<std::string>()};
  req.steps = 5;
  req.guidance_scale = c.cfg ? 7.5 : 1.0;
  req.scheduler = c.kind;
  req.compat = Compat::Diffusers;
  Tensor init = g->to_f32("latents_init");  // (2, 4, 32, 32)
  req.latents = init.reshaped({2, 1, 4, 32, 32});

  GenerationResult res = pipe.run(req);
  const std::string name = c.golden;
  EXPECT_EQ(res.signature.guidance, c.cfg);
  const auto timesteps = g->to_f64(g->get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;

  Tensor ref_latents;
  if (g->find(name + ".latents_final")) {
    ref_latents = g->to_f32(name + ".latents_final");
  } else {
    Tensor steps = g->to_f32(name + ".latents_steps");
    ref_latents = steps.slice0(steps.dim(0) - 1, steps.dim(0)).reshaped({2, 4, 32, 32});
  }
  test::expect_parity("pipeline " + name + " final latents", res.final_latents.reshaped({2, 4, 32, 32}), ref_latents);
  test::expect_close_abs("pipeline " + name + " images", res.images.reshaped({2, 64, 64, 3}),
                         g->to_f32(name + ".images"), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(AllSchedulers, PipelineParity,
                         ::testing::Values(Case{"pndm", SchedulerKind::Pndm, true},
                                           Case{"ddim", SchedulerKind::Ddim, true},
                                           Case{"lms", SchedulerKind::Lms, true},
                                           Case{"euler", SchedulerKind::Euler, true},
                                           Case{"dpmpp2m", SchedulerKind::DpmSolverPP, true},
                                           Case{"nocfg_pndm", SchedulerKind::Pndm, false}),
                         [](const auto& info) { return std::string(info.param.golden); });

TEST(PipelineParityLayout, OneDeviceWithBatchTwoMatchesToo) {
  auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors");
  auto pj = prompts_json();
  ShardedPipeline pipe(tiny_model());
  GenerationRequest req;
  for (const auto& p : pj["pipeline_prompts"]) req.prompts.push_back(p.get<std::string>());
  req.negative_prompts = {pj["pipeline_negative_prompt"].get<std::string>()};
  req.steps = 5;
  req.compat = Compat::Diffusers;
  req.devices = 1;
  req.batch_per_device = 2;
  req.latents = g->to_f32("latents_init").reshaped({1, 2, 4, 32, 32});
  GenerationResult res = pipe.run(req);
  test::expect_close_abs("pipeline pndm D=1 B=2 images", res.images.reshaped({2, 64, 64, 3}),
                         g->to_f32("pndm.images"), 1e-3);
}

TEST(PipelineParityEmbeddings, PromptAndNegativeEmbeddings) {
  auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors");
  auto pj = prompts_json();
  auto model = tiny_model();
  std::vector<int32_t> ids, neg;
  for (const auto& p : pj["pipeline_prompts"]) {
    auto e = model->tokenizer().encode(p.get<std::string>());
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    auto n = model->tokenizer().encode(pj["pipeline_negative_prompt"].get<std::string>());
    neg.insert(neg.end(), n.ids.begin(), n.ids.end());
  }
  test::expect_parity("pipeline prompt_embeds", model->text_encoder().forward(ids, 2, 77).last_hidden_state,
                      g->to_f32("prompt_embeds"));
  test::expect_parity("pipeline negative_prompt_embeds", model->text_encoder().forward(neg, 2, 77).last_hidden_state,
                      g->to_f32("negative_prompt_embeds"));
}

}  // namespace
