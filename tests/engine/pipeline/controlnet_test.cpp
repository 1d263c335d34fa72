// ControlNet against diffusers v0.31.0 on tiny random ControlNets for the tiny UNet
// (tests/data/tiny-controlnet, tools/goldens/make_controlnet_goldens.py): the model's residuals
// (diffusers folder and original single file), the UNet with residuals, and the whole
// StableDiffusionControlNetPipeline with one and with two ControlNets (MultiControlNetModel,
// different scales, guidance windows) under Compat::Diffusers; bf16 against f32; bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "models/layers.h"
#include "models/parameter_catalog.h"
#include "pipeline/controlnet.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "controlnet_cases.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path cn_dir() { return test::data_dir() / "tiny-controlnet"; }

std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(cn_dir() / "goldens.safetensors"); }

std::shared_ptr<const StableDiffusionModel> tiny_model(ComputeDType dtype = ComputeDType::F32) {
  ModelLoadOptions o;
  o.dtype = dtype;
  o.weight_cache = false;
  return StableDiffusionModel::load(test::tiny_sd_dir(), o);
}

std::vector<double> timesteps(const SafetensorsFile& g) {
  std::vector<double> t;
  for (int64_t v : g.to_i64(g.get("model.timesteps"))) t.push_back(static_cast<double>(v));
  return t;
}

void expect_residuals(const std::string& label, const UNetResiduals& got, const SafetensorsFile& g,
                      const std::string& prefix) {
  const int n = static_cast<int>(got.down.size());
  ASSERT_EQ(n, 6) << label;  // tiny UNet: conv_in + 2 levels × 2 layers + 1 downsampler
  for (int k = 0; k < n; ++k)
    test::expect_parity(cat(label, " down ", k), got.down[k], g.to_f32(cat(prefix, ".down.", k)));
  test::expect_parity(label + " mid", got.mid, g.to_f32(prefix + ".mid"));
}

UNetResiduals run_model(const ControlNetModel& cn, const SafetensorsFile& g) {
  Numerics numerics;  // diffusers flavour
  return cn.forward(g.to_f32("model.sample"), timesteps(g), g.to_f32("model.context"), g.to_f32("model.cond"), 0.7,
                    numerics);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(ControlNetModelParity, DiffusersFoldersMatchDiffusers) {
  auto g = goldens();
  auto a = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  EXPECT_EQ(a->config().num_down_residuals(), 6);
  EXPECT_EQ(a->config().image_scale(), 2);
  expect_residuals("controlnet_a", run_model(*a, *g), *g, "model.a");
  auto b = load_controlnet(cn_dir() / "controlnet_b", ComputeDType::F32);
  EXPECT_TRUE(b->config().bgr);
  expect_residuals("controlnet_b (bgr)", run_model(*b, *g), *g, "model.b");
}

TEST(ControlNetModelParity, OriginalSingleFileMatchesTheFolder) {
  auto g = goldens();
  auto a = load_controlnet(cn_dir() / "controlnet_a_ldm.safetensors", ComputeDType::F32);
  const ControlNetConfig& c = a->config();
  EXPECT_EQ(c.unet.block_out_channels, (std::vector<int>{32, 64}));
  EXPECT_EQ(c.conditioning_embedding_out_channels, (std::vector<int>{16, 32}));
  EXPECT_EQ(c.unet.cross_attention_dim, 32);
  expect_residuals("controlnet_a single file", run_model(*a, *g), *g, "model.a");
}

TEST(ControlNetModelParity, UNetAddsTheResidualsAsDiffusers) {
  auto g = goldens();
  auto model = tiny_model();
  UNetResiduals r;
  for (int k = 0; k < 6; ++k) r.down.push_back(to_nhwc(g->to_f32(cat("model.a.down.", k))));
  r.mid = to_nhwc(g->to_f32("model.a.mid"));
  Numerics numerics;
  const Tensor out = model->unet().forward(g->to_f32("model.sample"), timesteps(*g), g->to_f32("model.context"), nullptr,
                                           numerics, nullptr, &r);
  test::expect_parity("UNet with ControlNet residuals", out, g->to_f32("model.unet_out"));
  UNetResiduals short_list = r;
  short_list.down.pop_back();
  EXPECT_TRUE(contains(error_of([&] {
                         model->unet().forward(g->to_f32("model.sample"), timesteps(*g), g->to_f32("model.context"),
                                               nullptr, numerics, nullptr, &short_list);
                       }),
                       "5 down-block residuals"));
}

TEST(ControlNetKeep, MatchesDiffusersControlnetKeep) {
  auto g = goldens();
  const Tensor keep = g->to_f32("multi.keep");  // (6 calls, 2 nets)
  const double starts[] = {0.0, 0.2}, ends[] = {0.9, 0.7};
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(controlnet_keep(i, 6, starts[k], ends[k]), keep[i * 2 + k]) << "call " << i << " net " << k;
}

namespace {

Image8 control_png(int k) { return test::control_png(cn_dir(), k); }

GenerationRequest pipeline_request(ComputeDType dtype) {
  auto base = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors");
  GenerationRequest req = test::golden_prompts_request(test::golden_settings(test::tiny_sd_dir()));
  req.steps = 5;
  req.guidance_scale = 7.5;
  req.scheduler = SchedulerKind::Pndm;
  req.dtype = dtype;
  req.height = req.width = 64;
  req.latents = base->to_f32("latents_init").reshaped({2, 1, 4, 32, 32});
  return req;
}



GenerationResult run_case(const std::string& name, ComputeDType dtype) {
  GenerationRequest req = pipeline_request(dtype);
  test::add_controlnet_case(req, name, cn_dir(), dtype);
  ShardedPipeline pipe(tiny_model(dtype));
  return pipe.run(req);
}

}  // namespace

class ControlNetPipelineParity : public ::testing::TestWithParam<const char*> {};

TEST_P(ControlNetPipelineParity, MatchesStableDiffusionControlNetPipeline) {
  test::expect_case_parity("controlnet pipeline", GetParam(), run_case(GetParam(), ComputeDType::F32), *goldens(), 6,
                           {2, 4, 32, 32}, {2, 64, 64, 3});
}

TEST_P(ControlNetPipelineParity, Bf16ImagesWithinOnePercentOfF32) {
  test::expect_bf16_images_close_to_f32("controlnet pipeline", GetParam(), run_case);
}

INSTANTIATE_TEST_SUITE_P(OneAndTwo, ControlNetPipelineParity, ::testing::Values("single", "multi"),
                         [](const auto& info) { return std::string(info.param); });

TEST(ControlNetPipeline, WithoutControlNetsTheRunIsUnchangedAndResidualsMatter) {
  GenerationRequest plain = pipeline_request(ComputeDType::F32);
  ShardedPipeline pipe(tiny_model());
  const GenerationResult base = pipe.run(plain);
  GenerationRequest zero = plain;
  test::add_single_controlnet(zero, cn_dir(), ComputeDType::F32);
  zero.controlnets[0].scale = 0.0;  // residuals × 0: the UNet adds zeros
  const test::Diff same = test::diff(pipe.run(zero).images, base.images);
  EXPECT_EQ(same.max_abs, 0.0);
  GenerationRequest on = plain;
  test::add_single_controlnet(on, cn_dir(), ComputeDType::F32);
  EXPECT_GT(test::diff(pipe.run(on).images, base.images).max_abs, 1e-2);
}

TEST(ControlNetPipeline, FlaxTakesTheSizeFromTheImageFlooredTo64) {
  GenerationRequest req = pipeline_request(ComputeDType::F32);
  req.compat = Compat::Flax;
  req.height = req.width = 0;
  req.latents.reset();
  test::add_single_controlnet(req, cn_dir(), ComputeDType::F32);
  req.controlnets[0].images = {control_png(2)};  // 96×80 → 64×64
  ShardedPipeline pipe(tiny_model());
  const ResolvedRequest r = pipe.resolve(req);
  EXPECT_EQ(r.signature.width, 64);
  EXPECT_EQ(r.signature.height, 64);
  EXPECT_EQ(r.request.controlnets[0].images[0].width, 64);
}

// ---- bad input ----

TEST(ControlNetBadInput, TruncatedAndHostileFilesNameTheFile) {
  const fs::path dir = test::temp_dir("controlnet_bad_files");
  const fs::path src = cn_dir() / "controlnet_a_ldm.safetensors";
  const fs::path truncated = dir / "truncated.safetensors";
  {
    std::ifstream in(src, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  EXPECT_TRUE(contains(error_of([&] { load_controlnet(truncated, ComputeDType::F32); }), "truncated.safetensors"));
  const fs::path garbage = dir / "garbage.safetensors";
  std::ofstream(garbage, std::ios::binary) << "\xff\xff\xff\xff\xff\xff\xff\x7fnot a safetensors file";
  EXPECT_TRUE(contains(error_of([&] { load_controlnet(garbage, ComputeDType::F32); }), "garbage.safetensors"));
  // A UNet file is no ControlNet.
  const std::string unet = error_of([&] {
    load_controlnet(test::tiny_sd_dir() / "unet" / "diffusion_pytorch_model.safetensors", ComputeDType::F32);
  });
  EXPECT_TRUE(contains(unet, "is not a ControlNet checkpoint"));
  EXPECT_TRUE(contains(error_of([&] { load_controlnet(dir / "missing.safetensors", ComputeDType::F32); }),
                       "does not exist"));
  const fs::path pth = dir / "model.pth";
  std::ofstream(pth) << "x";
  EXPECT_TRUE(contains(error_of([&] { load_controlnet(pth, ComputeDType::F32); }), ".safetensors"));
}

TEST(ControlNetBadInput, MissingAndUnknownTensorsAreNamed) {
  const fs::path src = cn_dir() / "controlnet_a_ldm.safetensors";
  auto rewrite = [&](const std::string& name, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      auto f = SafetensorsFile::open(src);
      for (const auto& t : f->tensors()) tensors.emplace_back(t.name, f->to_f32(t));
    }
    edit(tensors);
    const fs::path out = test::temp_dir("controlnet_" + name) / "cn.safetensors";
    write_safetensors_f32(out, tensors);
    return out;
  };
  const fs::path missing = rewrite("missing", [](auto& t) {
    std::erase_if(t, [](auto& p) { return p.first == "control_model.zero_convs.3.0.weight"; });
  });
  const std::string m = error_of([&] { load_controlnet(missing, ComputeDType::F32); });
  EXPECT_TRUE(contains(m, "controlnet_down_blocks.3.weight")) << m;
  const fs::path extra = rewrite("extra", [](auto& t) { t.emplace_back("control_model.stray.weight", Tensor::zeros({2})); });
  const std::string x = error_of([&] { load_controlnet(extra, ComputeDType::F32); });
  EXPECT_TRUE(contains(x, "stray")) << x;
  const fs::path wrong_shape = rewrite("shape", [](auto& t) {
    for (auto& p : t)
      if (p.first == "control_model.middle_block_out.0.weight") p.second = Tensor::zeros({64, 64, 3, 3});
  });
  const std::string s = error_of([&] { load_controlnet(wrong_shape, ComputeDType::F32); });
  EXPECT_TRUE(contains(s, "controlnet_mid_block.weight")) << s;
}

TEST(ControlNetBadInput, AnotherArchitectureIsRefusedAtResolve) {
  // The demo model's UNet is not the tiny one: the tiny ControlNet cannot drive it.
  ModelLoadOptions o;
  o.weight_cache = false;
  ShardedPipeline pipe(StableDiffusionModel::load(StableDiffusionModel::default_model_path(), o));
  GenerationRequest req;
  req.prompts = {"a red circle"};
  test::add_single_controlnet(req, cn_dir(), ComputeDType::F32);
  req.controlnets[0].images = {control_png(0)};
  const std::string e = error_of([&] { pipe.resolve(req); });
  EXPECT_TRUE(contains(e, "another architecture")) << e;
  // An SDXL-style config without the widths of its addition embedding is refused naming them
  // (SDXL ControlNets themselves: sdxl_controlnet_test.cpp).
  EXPECT_TRUE(contains(error_of([] {
                         ControlNetConfig::from_json(R"({"_class_name": "ControlNetModel", "addition_embed_type": "text_time"})",
                                                     "config.json");
                       }),
                       "addition_time_embed_dim"));
  EXPECT_TRUE(contains(error_of([] { ControlNetConfig::from_json(R"({"_class_name": "UNet2DConditionModel"})", "c.json"); }),
                       "not a ControlNetModel"));
}

TEST(ControlNetBadInput, ImageCountsRangesAndDtypeAreChecked) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest req = pipeline_request(ComputeDType::F32);
  test::add_single_controlnet(req, cn_dir(), ComputeDType::F32);
  req.controlnets[0].images.push_back(control_png(2));  // 3 images, 2 devices
  EXPECT_TRUE(contains(error_of([&] { pipe.resolve(req); }), "3 control images for 2 devices"));
  req.controlnets[0].images.pop_back();
  req.controlnets[0].guidance_start = 0.8;
  req.controlnets[0].guidance_end = 0.5;
  EXPECT_TRUE(contains(error_of([&] { pipe.resolve(req); }), "start"));
  req.controlnets[0].guidance_start = 0.0;
  req.controlnets[0].guidance_end = 1.0;
  req.controlnets[0].images = {};
  EXPECT_TRUE(contains(error_of([&] { pipe.resolve(req); }), "0 control images"));
  GenerationRequest bf = pipeline_request(ComputeDType::F32);
  test::add_single_controlnet(bf, cn_dir(), ComputeDType::BF16);
  EXPECT_TRUE(contains(error_of([&] { pipe.resolve(bf); }), "another dtype"));
}

TEST(ControlNetMetadata, A1111KeysAndJsonRoundTrip) {
  ImageMetadata m;
  m.prompts = {"x"};
  m.negative_prompts = {""};
  m.steps = 5;
  m.width = m.height = 64;
  m.controlnets = {{"control_v11p_sd15_canny", "canny", 0.8, 0.0, 1.0}, {"depth", "none", 1.0, 0.25, 0.5}};
  const std::string text = a1111_parameters(m);
  std::printf("%s\n", text.c_str());
  EXPECT_TRUE(contains(text, "ControlNet 0: \"Module: canny, Model: control_v11p_sd15_canny, Weight: 0.8, Threshold A: "
                             "100.0, Threshold B: 200.0, Guidance Start: 0.0, Guidance End: 1.0\""));
  EXPECT_TRUE(contains(text, "ControlNet 1: \"Module: none, Model: depth, Weight: 1.0, Guidance Start: 0.25, "
                             "Guidance End: 0.5\""));
  const auto back = parse_png_metadata(png_texts(m));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->controlnets.size(), 2u);
  EXPECT_EQ(back->controlnets[1].name, "depth");
  EXPECT_EQ(back->controlnets[1].guidance_start, 0.25);
  EXPECT_EQ(back->controlnets[0].module, "canny");
  EXPECT_EQ(back->controlnets[0].weight, 0.8);
}

// The app's Canny thresholds are the user's: they go into both texts and come back from each.
TEST(ControlNetMetadata, CannyThresholdsRoundTripThroughJsonAndA1111) {
  ImageMetadata m;
  m.prompts = {"x"};
  m.negative_prompts = {""};
  m.steps = 5;
  m.width = m.height = 64;
  m.controlnets = {{"edges", "canny", 0.7, 0.1, 0.9, 50, 150.5}};
  const std::string text = a1111_parameters(m);
  EXPECT_TRUE(contains(text, "ControlNet 0: \"Module: canny, Model: edges, Weight: 0.7, Threshold A: 50.0, "
                             "Threshold B: 150.5, Guidance Start: 0.1, Guidance End: 0.9\""))
      << text;
  const auto from_json = parse_png_metadata(png_texts(m));
  const auto from_text = parse_png_metadata({{"parameters", text}});
  for (const auto& back : {from_json, from_text}) {
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(back->controlnets.size(), 1u);
    EXPECT_EQ(back->controlnets[0].threshold_a, 50);
    EXPECT_EQ(back->controlnets[0].threshold_b, 150.5);
    EXPECT_EQ(back->controlnets[0].guidance_end, 0.9);
  }
}

TEST(ControlNetCatalog, ListsExactlyTheTensorsOfAControlNetFolder) {
  const ControlNetConfig config = ControlNetConfig::from_json(read_text_file(cn_dir() / "controlnet_a" / "config.json"),
                                                              "controlnet_a/config.json");
  const auto specs = controlnet_parameters(config);
  auto f = SafetensorsFile::open(cn_dir() / "controlnet_a" / "diffusion_pytorch_model.safetensors");
  ASSERT_EQ(specs.size(), f->tensors().size());
  for (const ParameterSpec& p : specs) {
    const TensorRecord* r = f->find(p.name);
    ASSERT_NE(r, nullptr) << p.name;
    EXPECT_EQ(r->shape, p.shape) << p.name;
  }
  ControlNetConfig sd15;
  sd15.unet = UNetConfig::sd1();
  EXPECT_EQ(sd15.num_down_residuals(), 12);
  std::printf("[controlnet] SD 1.5 ControlNet: %lld parameters\n",
              static_cast<long long>(parameter_count(controlnet_parameters(sd15))));
}

TEST(ControlNetModelParity, AGuidedBatchSharesItsTextFreeLayersBitForBit) {
  auto g = goldens();
  auto a = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  const Tensor one = g->to_f32("model.sample").slice0(0, 1), cond = g->to_f32("model.cond").slice0(0, 1);
  const Tensor context = g->to_f32("model.context");
  Tensor twice = Tensor::empty({2, 4, 32, 32}), cond2 = Tensor::empty({2, 3, 64, 64});
  for (int n = 0; n < 2; ++n) {
    std::copy(one.begin(), one.end(), twice.data() + n * one.numel());
    std::copy(cond.begin(), cond.end(), cond2.data() + n * cond.numel());
  }
  Numerics numerics;
  const UNetResiduals both = a->forward(twice, {981, 981}, context, cond2, 0.7, numerics);
  for (int n = 0; n < 2; ++n) {
    const UNetResiduals alone = a->forward(one, {981}, context.slice0(n, n + 1), cond, 0.7, numerics);
    for (size_t k = 0; k < alone.down.size(); ++k)
      EXPECT_EQ(test::diff(both.down[k].slice0(n, n + 1), alone.down[k]).max_abs, 0.0) << "row " << n << " down " << k;
    EXPECT_EQ(test::diff(both.mid.slice0(n, n + 1), alone.mid).max_abs, 0.0) << "row " << n;
  }
}

TEST(ControlNetMetadata, A1111TextAloneGivesTheControlNetsAndKeepsTheModelName) {
  ImageMetadata m;
  m.prompts = {"x"};
  m.negative_prompts = {""};
  m.steps = 5;
  m.width = m.height = 64;
  m.model_name = "base-model";
  m.controlnets = {{"control_v11p_sd15_canny", "canny", 0.8, 0.0, 1.0}, {"depth", "none", 1.0, 0.25, 0.5}};
  const auto back = parse_png_metadata({{"parameters", a1111_parameters(m)}});  // no octodiff chunk
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->model_name, "base-model");  // not the "Model: …" inside a ControlNet's quotes
  ASSERT_EQ(back->controlnets.size(), 2u);
  EXPECT_EQ(back->controlnets[0].name, "control_v11p_sd15_canny");
  EXPECT_EQ(back->controlnets[0].module, "canny");
  EXPECT_EQ(back->controlnets[0].weight, 0.8);
  EXPECT_EQ(back->controlnets[1].guidance_start, 0.25);
  EXPECT_EQ(back->controlnets[1].guidance_end, 0.5);
}
