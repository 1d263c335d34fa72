// SDXL ControlNets against diffusers v0.31.0 on tiny random ControlNets for the tiny SDXL UNet
// (tests/data/tiny-sdxl-controlnet, tools/goldens/make_sdxl_controlnet_goldens.py): the model's
// residuals with the text_time conditioning, the SDXL UNet taking them, and the whole
// StableDiffusionXLControlNetPipeline with one and with two ControlNets (MultiControlNetModel,
// different scales, guidance windows) under Compat::Diffusers; bf16 against f32; ControlNets of
// the other family refused naming what does not fit; the Flax size rule. Every error printed.
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/layers.h"
#include "models/parameter_catalog.h"
#include "pipeline/controlnet.h"
#include "pipeline/sharded_pipeline.h"
#include "controlnet_cases.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path cn_dir() { return test::data_dir() / "tiny-sdxl-controlnet"; }
fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(cn_dir() / "goldens.safetensors"); }

std::shared_ptr<const StableDiffusionModel> tiny_sdxl(ComputeDType dtype = ComputeDType::F32) {
  ModelLoadOptions o;
  o.dtype = dtype;
  o.weight_cache = false;
  return StableDiffusionModel::load(sdxl_dir(), o);
}

std::vector<double> timesteps(const SafetensorsFile& g) {
  std::vector<double> t;
  for (int64_t v : g.to_i64(g.get("model.timesteps"))) t.push_back(static_cast<double>(v));
  return t;
}

UNetTextTime model_text_time(const SafetensorsFile& g) {
  return {g.to_f32("model.text_embeds"), g.to_f32("model.time_ids")};
}

UNetResiduals run_model(const ControlNetModel& cn, const SafetensorsFile& g) {
  Numerics numerics;  // diffusers flavour
  const UNetTextTime tt = model_text_time(g);
  return cn.forward(g.to_f32("model.sample"), timesteps(g), g.to_f32("model.context"), g.to_f32("model.cond"), 0.7,
                    numerics, &tt);
}

void expect_residuals(const std::string& label, const UNetResiduals& got, const SafetensorsFile& g,
                      const std::string& prefix) {
  const int n = static_cast<int>(got.down.size());
  ASSERT_EQ(n, 9) << label;  // 3 levels: conv_in + 3 levels × 2 layers + 2 downsamplers
  for (int k = 0; k < n; ++k)
    test::expect_parity(cat(label, " down ", k), got.down[k], g.to_f32(cat(prefix, ".down.", k)));
  test::expect_parity(label + " mid", got.mid, g.to_f32(prefix + ".mid"));
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

TEST(SdxlControlNetModel, LoadsATextTimeControlNetFolder) {
  auto a = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  const ControlNetConfig& c = a->config();
  EXPECT_TRUE(c.unet.text_time());
  EXPECT_EQ(c.unet.projection_class_embeddings_input_dim, 88);
  EXPECT_EQ(c.unet.addition_time_embed_dim, 8);
  EXPECT_EQ(c.unet.transformer_layers_per_block, (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(c.num_down_residuals(), 9);
  EXPECT_EQ(c.image_scale(), 2);
  EXPECT_EQ(c.mismatch_with(tiny_sdxl()->unet().config()), "");
}

TEST(SdxlControlNetModel, TheDiffusersCannySdxlConfigReadsAsSdxlBase) {
  // diffusers/controlnet-canny-sdxl-1.0's config.json (its weights are 2.5 GB: not in the tests).
  const char* canny_sdxl = R"({
    "_class_name": "ControlNetModel", "_diffusers_version": "0.20.0.dev0", "act_fn": "silu",
    "addition_embed_type": "text_time", "addition_embed_type_num_heads": 64, "addition_time_embed_dim": 256,
    "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280], "class_embed_type": null,
    "conditioning_channels": 3, "conditioning_embedding_out_channels": [16, 32, 96, 256],
    "controlnet_conditioning_channel_order": "rgb", "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "downsample_padding": 1, "encoder_hid_dim": null, "encoder_hid_dim_type": null, "flip_sin_to_cos": true,
    "freq_shift": 0, "global_pool_conditions": false, "in_channels": 4, "layers_per_block": 2,
    "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32, "num_attention_heads": null,
    "num_class_embeds": null, "only_cross_attention": false, "projection_class_embeddings_input_dim": 2816,
    "resnet_time_scale_shift": "default", "transformer_layers_per_block": [1, 2, 10], "upcast_attention": null,
    "use_linear_projection": true})";
  const ControlNetConfig c = ControlNetConfig::from_json(canny_sdxl, "controlnet-canny-sdxl-1.0/config.json");
  EXPECT_EQ(c.mismatch_with(UNetConfig::sdxl()), "");
  EXPECT_EQ(c.num_down_residuals(), 9);
  EXPECT_EQ(c.image_scale(), 8);
  EXPECT_EQ(c.unet.num_heads, (std::vector<int>{5, 10, 20}));
  // Against SD 1.5 every difference is named, the model family's first.
  const std::string m = c.mismatch_with(UNetConfig::sd1());
  std::printf("SDXL ControlNet vs the SD 1.5 UNet: %s\n", m.c_str());
  EXPECT_TRUE(contains(m, "addition embedding \"text_time\" of 2816 values")) << m;
  EXPECT_TRUE(contains(m, "cross_attention_dim 2048 vs the UNet's 768")) << m;
  EXPECT_TRUE(contains(m, "block_out_channels [320,640,1280]")) << m;
  EXPECT_LT(m.find("addition embedding"), m.find("block_out_channels")) << m;
}

TEST(SdxlControlNetCatalog, ListsExactlyTheTensorsOfAnSdxlControlNetFolder) {
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
}

TEST(SdxlControlNetModelParity, ResidualsMatchDiffusers) {
  auto g = goldens();
  auto a = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  expect_residuals("sdxl controlnet_a", run_model(*a, *g), *g, "model.a");
  auto b = load_controlnet(cn_dir() / "controlnet_b", ComputeDType::F32);
  EXPECT_TRUE(b->config().bgr);
  expect_residuals("sdxl controlnet_b (bgr)", run_model(*b, *g), *g, "model.b");
}

TEST(SdxlControlNetModelParity, TheSdxlUNetAddsTheResidualsAsDiffusers) {
  auto g = goldens();
  auto model = tiny_sdxl();
  UNetResiduals r;
  for (int k = 0; k < 9; ++k) r.down.push_back(to_nhwc(g->to_f32(cat("model.a.down.", k))));
  r.mid = to_nhwc(g->to_f32("model.a.mid"));
  const UNetTextTime tt = model_text_time(*g);
  const Tensor out = model->unet().forward(g->to_f32("model.sample"), timesteps(*g), g->to_f32("model.context"),
                                           nullptr, Numerics{}, nullptr, &r, &tt);
  test::expect_parity("sdxl UNet with ControlNet residuals", out, g->to_f32("model.unet_out"));
}

TEST(SdxlControlNetModel, TextTimeIsRequiredAndChecked) {
  auto g = goldens();
  auto a = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  const Tensor sample = g->to_f32("model.sample"), context = g->to_f32("model.context"), cond = g->to_f32("model.cond");
  EXPECT_TRUE(contains(error_of([&] { a->forward(sample, timesteps(*g), context, cond, 1.0, Numerics{}); }),
                       "needs text_embeds and time_ids"));
  const UNetTextTime five_ids{g->to_f32("model.text_embeds"), Tensor::zeros({2, 5})};  // 40 + 5 × 8 != 88
  EXPECT_TRUE(contains(error_of([&] { a->forward(sample, timesteps(*g), context, cond, 1.0, Numerics{}, &five_ids); }),
                       "add_embedding takes 88"));
  // An SD 1.x ControlNet takes no text_time.
  auto sd = load_controlnet(test::data_dir() / "tiny-controlnet" / "controlnet_a", ComputeDType::F32);
  const UNetTextTime tt{Tensor::zeros({1, 40}), Tensor::zeros({1, 6})};
  EXPECT_TRUE(contains(error_of([&] {
                         sd->forward(Tensor::zeros({1, 4, 8, 8}), {1}, Tensor::zeros({1, 77, 32}),
                                     Tensor::zeros({1, 3, 16, 16}), 1.0, Numerics{}, &tt);
                       }),
                       "no text_time"));
}

TEST(SdxlControlNetModel, AnSdxlControlNetSingleFileIsRefusedByName) {
  // An original-layout ControlNet with SDXL's label_emb: its size ids' width is not in the weights.
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    auto f = SafetensorsFile::open(test::data_dir() / "tiny-controlnet" / "controlnet_a_ldm.safetensors");
    for (const auto& t : f->tensors()) tensors.emplace_back(t.name, f->to_f32(t));
  }
  tensors.emplace_back("control_model.label_emb.0.0.weight", Tensor::zeros({128, 88}));
  tensors.emplace_back("control_model.label_emb.0.0.bias", Tensor::zeros({128}));
  const fs::path file = test::temp_dir("sdxl_controlnet_single_file") / "cn_xl.safetensors";
  write_safetensors_f32(file, tensors);
  const std::string e = error_of([&] { load_controlnet(file, ComputeDType::F32); });
  EXPECT_TRUE(contains(e, "an SDXL ControlNet")) << e;
  EXPECT_TRUE(contains(e, "cn_xl.safetensors")) << e;
}

namespace {

Image8 control_png(int k) { return test::control_png(cn_dir(), k); }

// tiny-sdxl's `cfg` pipeline golden's request: two prompts (one per device), a negative prompt,
// 5 Euler steps, guidance 5, 32 × 32, the goldens' initial latents.
GenerationRequest pipeline_request(ComputeDType dtype) {
  const nlohmann::json s = test::golden_settings(sdxl_dir());
  auto base = SafetensorsFile::open(sdxl_dir() / "goldens" / "pipeline.safetensors");
  GenerationRequest req = test::golden_prompts_request(s);
  req.steps = s["steps"].get<int>();
  req.guidance_scale = s["guidance"].get<double>();
  req.dtype = dtype;
  req.height = req.width = 32;
  req.latents = base->to_f32("latents_init").reshaped({2, 1, 4, 16, 16});
  return req;
}



GenerationResult run_case(const std::string& name, ComputeDType dtype) {
  GenerationRequest req = pipeline_request(dtype);
  test::add_controlnet_case(req, name, cn_dir(), dtype);
  ShardedPipeline pipe(tiny_sdxl(dtype));
  return pipe.run(req);
}

}  // namespace

TEST(SdxlControlNetKeep, MatchesDiffusersControlnetKeep) {
  auto g = goldens();
  const Tensor keep = g->to_f32("multi.keep");  // (5 calls, 2 nets)
  ASSERT_EQ(keep.shape(), (Shape{5, 2}));
  const double starts[] = {0.0, 0.2}, ends[] = {0.9, 0.7};
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(controlnet_keep(i, 5, starts[k], ends[k]), keep[i * 2 + k]) << "call " << i << " net " << k;
}

class SdxlControlNetPipelineParity : public ::testing::TestWithParam<const char*> {};

TEST_P(SdxlControlNetPipelineParity, MatchesStableDiffusionXLControlNetPipeline) {
  test::expect_case_parity("sdxl controlnet pipeline", GetParam(), run_case(GetParam(), ComputeDType::F32),
                           *goldens(), 5, {2, 4, 16, 16}, {2, 32, 32, 3});
}

TEST_P(SdxlControlNetPipelineParity, Bf16ImagesWithinOnePercentOfF32) {
  test::expect_bf16_images_close_to_f32("sdxl controlnet pipeline", GetParam(), run_case);
}

INSTANTIATE_TEST_SUITE_P(OneAndTwo, SdxlControlNetPipelineParity, ::testing::Values("single", "multi"),
                         [](const auto& info) { return std::string(info.param); });

TEST(SdxlControlNetPipeline, TheControlNetChangesTheRun) {
  ShardedPipeline pipe(tiny_sdxl());
  const GenerationResult plain = pipe.run(pipeline_request(ComputeDType::F32));
  const GenerationResult controlled = run_case("single", ComputeDType::F32);
  const test::Diff d = test::diff(controlled.images, plain.images);
  std::printf("sdxl: the ControlNet moved the images by up to %.3e\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-3);
}

TEST(SdxlControlNetPipeline, FlaxTakesTheSizeFromTheImageFlooredTo64) {
  // tiny-controlnet's 96×80 image: the Flax rule floors it to 64×64, diffusers' to the VAE scale (2).
  const Image8 image = read_png(test::data_dir() / "tiny-controlnet" / "control_2.png");
  ShardedPipeline pipe(tiny_sdxl());
  for (Compat compat : {Compat::Flax, Compat::Diffusers}) {
    GenerationRequest req;
    req.prompts = {"a red circle"};
    req.steps = 2;
    req.compat = compat;
    ControlNetUse use;
    use.model = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
    use.images = {image};
    req.controlnets = {use};
    const ResolvedRequest r = pipe.resolve(req);
    const bool flax = compat == Compat::Flax;
    EXPECT_EQ(r.signature.width, flax ? 64 : 96);
    EXPECT_EQ(r.signature.height, flax ? 64 : 80);
    if (flax) {
      const GenerationResult res = pipe.run(req);
      EXPECT_EQ(res.images.shape(), (Shape{1, 1, 64, 64, 3}));
    }
  }
}

TEST(SdxlControlNetBadInput, AControlNetOfTheOtherFamilyIsRefusedNamingWhatDoesNotFit) {
  // An SD 1.x ControlNet (tests/data/tiny-controlnet, for tiny-sd's UNet) on the SDXL model.
  ShardedPipeline sdxl(tiny_sdxl());
  GenerationRequest req = pipeline_request(ComputeDType::F32);
  ControlNetUse sd;
  sd.model = load_controlnet(test::data_dir() / "tiny-controlnet" / "controlnet_a", ComputeDType::F32);
  sd.name = "sd15-cn";
  sd.images = {control_png(0)};
  req.controlnets = {sd};
  const std::string e = error_of([&] { sdxl.resolve(req); });
  EXPECT_TRUE(contains(e, "ControlNet 1 ('sd15-cn') is for another architecture")) << e;
  EXPECT_TRUE(contains(e, "an SD 1.x/2.x ControlNet on an SDXL model")) << e;
  EXPECT_TRUE(contains(e, "addition embedding none (SD 1.x/2.x) vs the UNet's \"text_time\" of 88 values")) << e;
  EXPECT_TRUE(contains(e, "cross_attention_dim 32 vs the UNet's 80")) << e;

  // The SDXL ControlNet on the SD 1.x model.
  ModelLoadOptions o;
  o.weight_cache = false;
  ShardedPipeline sd_pipe(StableDiffusionModel::load(test::tiny_sd_dir(), o));
  GenerationRequest sd_req;
  sd_req.prompts = {"a red circle"};
  ControlNetUse xl;
  xl.model = load_controlnet(cn_dir() / "controlnet_a", ComputeDType::F32);
  xl.images = {control_png(0)};
  sd_req.controlnets = {xl};
  const std::string x = error_of([&] { sd_pipe.resolve(sd_req); });
  EXPECT_TRUE(contains(x, "an SDXL ControlNet on an SD 1.x/2.x model")) << x;
  EXPECT_TRUE(contains(x, "vs the UNet's none")) << x;
  EXPECT_TRUE(contains(x, "cross_attention_dim 80 vs the UNet's 32")) << x;
}
