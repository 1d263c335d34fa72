// LoRA merged at load (pipeline/lora.h, StableDiffusionModel::with_loras): parity of the UNet and
// text encoder with diffusers' fused weights for a random LoRA in each file format
// (tests/data/tiny-sd-lora, made by tools/goldens/make_lora_goldens.py), several LoRAs with
// strengths, strength 0, bf16, the weight cache, switching LoRAs without repacking, the prompt
// syntax. Every comparison prints its error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "models/numerics.h"
#include "pipeline/lora.h"
#include "pipeline/model.h"
#include "pipeline/sharded_pipeline.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path lora_dir() { return test::data_dir() / "tiny-sd-lora"; }
fs::path lora_file(const std::string& name) { return lora_dir() / (name + ".safetensors"); }
std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(lora_dir() / "goldens.safetensors"); }

ModelLoadOptions no_cache(std::vector<LoraSpec> loras = {}, ComputeDType dtype = ComputeDType::F32) {
  ModelLoadOptions o;
  o.weight_cache = false;
  o.loras = std::move(loras);
  o.dtype = dtype;
  return o;
}

std::shared_ptr<const StableDiffusionModel> load(std::vector<LoraSpec> loras = {}) {
  return StableDiffusionModel::load(test::tiny_sd_dir(), no_cache(std::move(loras)));
}

Tensor unet_output(const StableDiffusionModel& m) {
  auto g = goldens();
  const double t = static_cast<double>(g->to_i64("timestep").at(0));
  return m.unet().forward(g->to_f32("sample"), {t, t}, g->to_f32("encoder_hidden_states"), Numerics{Flavour::Diffusers});
}

Tensor text_encoder_output(const StableDiffusionModel& m) {
  auto ids64 = goldens()->to_i64("input_ids");
  std::vector<int32_t> ids(ids64.begin(), ids64.end());
  return m.text_encoder().forward(ids, 3, 77).last_hidden_state;
}

// The golden moves far more than the tolerance away from the base model's output: a LoRA that
// was silently not applied could not pass.
void expect_lora_moves(const std::string& label, const std::string& golden, const std::string& base) {
  auto g = goldens();
  const test::Diff d = test::diff(g->to_f32(golden), g->to_f32(base));
  std::printf("  %s: the LoRA moves diffusers' output by %.3g (scale %.3g)\n", label.c_str(), d.max_abs, d.ref_scale);
  EXPECT_GT(d.max_abs, 100 * 1e-4 * std::max(1.0, d.ref_scale)) << label;  // 100× the parity bar
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.numel())) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Lora, BaseReferenceMatchesTheModel) {
  auto m = load();
  test::expect_parity("base unet", unet_output(*m), goldens()->to_f32("unet_base"));
  test::expect_parity("base text encoder", text_encoder_output(*m), goldens()->to_f32("text_encoder_base"));
}

TEST(Lora, EachFormatMatchesDiffusersFused) {
  for (const std::string fmt : {"kohya", "kohya_ldm", "peft", "diffusers_old"}) {
    auto m = load({{lora_file(fmt), 1.0f}});
    ASSERT_EQ(m->loras().size(), 1u);
    std::printf("%s: format '%s', %d UNet and %d text-encoder parameters\n", fmt.c_str(), m->loras()[0].format.c_str(),
                m->loras()[0].unet_layers, m->loras()[0].text_encoder_layers);
    expect_lora_moves(fmt + " unet", "unet_" + fmt, "unet_base");
    test::expect_parity(fmt + " unet", unet_output(*m), goldens()->to_f32("unet_" + fmt));
    expect_lora_moves(fmt + " text encoder", "text_encoder_" + fmt, "text_encoder_base");
    test::expect_parity(fmt + " text encoder", text_encoder_output(*m), goldens()->to_f32("text_encoder_" + fmt));
  }
}

// The whole pipeline (--compat diffusers, PNDM, 5 steps, guidance 7.5, negative prompt "") against
// diffusers' StableDiffusionPipeline with the same LoRAs fused into the UNet and text encoder.
TEST(Lora, PipelineMatchesDiffusersWithTheLorasFused) {
  const nlohmann::json pj = test::golden_settings(test::tiny_sd_dir());
  const Tensor init = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors")->to_f32("latents_init");
  const std::vector<std::pair<std::string, std::vector<LoraSpec>>> cases = {
      {"base", {}},
      {"kohya", {{lora_file("kohya"), 1.0f}}},
      {"kohya_ldm", {{lora_file("kohya_ldm"), 1.0f}}},
      {"peft", {{lora_file("peft"), 1.0f}}},
      {"diffusers_old", {{lora_file("diffusers_old"), 1.0f}}},
      {"kohya0.7_peft-0.5", {{lora_file("kohya"), 0.7f}, {lora_file("peft"), -0.5f}}},
  };
  auto g = goldens();
  for (const auto& [name, loras] : cases) {
    ShardedPipeline pipe(load(loras));
    GenerationRequest req = test::golden_prompts_request(pj);
    req.negative_prompts = {""};  // not the goldens' negative prompt
    req.steps = 5;
    req.guidance_scale = 7.5;
    req.scheduler = SchedulerKind::Pndm;
    req.latents = init.reshaped({2, 1, 4, 32, 32});
    GenerationResult res = pipe.run(req);
    const std::string key = "pipeline_" + name;
    if (name != "base") expect_lora_moves(key + " images", key + ".images", "pipeline_base.images");
    test::expect_parity(key + " final latents", res.final_latents.reshaped({2, 4, 32, 32}), g->to_f32(key + ".latents_final"));
    test::expect_close_abs(key + " images", res.images.reshaped({2, 64, 64, 3}), g->to_f32(key + ".images"), 1e-3);
  }
}

TEST(Lora, FormatsAreDetected) {
  const std::map<std::string, std::string> expected = {{"kohya", "kohya"},
                                                       {"kohya_ldm", "kohya + kohya (LDM names)"},
                                                       {"peft", "diffusers/PEFT"},
                                                       {"diffusers_old", "diffusers (attention processors)"}};
  for (const auto& [file, format] : expected) {
    auto m = load({{lora_file(file), 1.0f}});
    EXPECT_EQ(m->loras()[0].format, format) << file;  // kohya_ldm: its text encoder part is diffusers-named
    EXPECT_EQ(m->loras()[0].name, file);
  }
}

TEST(Lora, TwoLorasWithStrengths) {
  auto m = load({{lora_file("kohya"), 0.7f}, {lora_file("peft"), -0.5f}});
  expect_lora_moves("kohya 0.7 + peft -0.5 unet", "unet_kohya0.7_peft-0.5", "unet_base");
  test::expect_parity("kohya 0.7 + peft -0.5 unet", unet_output(*m), goldens()->to_f32("unet_kohya0.7_peft-0.5"));
  test::expect_parity("kohya 0.7 + peft -0.5 text encoder", text_encoder_output(*m),
                      goldens()->to_f32("text_encoder_kohya0.7_peft-0.5"));
}

TEST(Lora, StrengthZeroIsTheBaseModelBitForBit) {
  auto base = load();
  auto zero = load({{lora_file("kohya"), 0.0f}, {lora_file("peft"), 0.0f}});
  EXPECT_TRUE(bit_identical(unet_output(*zero), unet_output(*base)));
  EXPECT_TRUE(bit_identical(text_encoder_output(*zero), text_encoder_output(*base)));
  const PackedLayerStats s = zero->packed_layer_stats(ModelComponent::UNet);
  EXPECT_EQ(s.packed, 0);
  EXPECT_EQ(s.reused, base->packed_layer_stats(ModelComponent::UNet).packed);
}

// Switching LoRAs on a loaded model packs only the layers a LoRA touches; every other layer's
// packed weights are the base's own (the counts come from the one place layers get their packed
// weights, models/layers.cpp), and the result equals a fresh load with that LoRA bit for bit.
TEST(Lora, SwitchingRepacksOnlyTheTouchedLayers) {
  auto base = load();
  const int unet_layers = base->packed_layer_stats(ModelComponent::UNet).packed;
  const int te_layers = base->packed_layer_stats(ModelComponent::TextEncoder).packed;
  std::printf("base: %d UNet and %d text-encoder packed layers\n", unet_layers, te_layers);
  ASSERT_GT(unet_layers, 30);
  auto check = [&](const std::shared_ptr<const StableDiffusionModel>& m, int unet_params, int te_params) {
    const PackedLayerStats u = m->packed_layer_stats(ModelComponent::UNet);
    const PackedLayerStats t = m->packed_layer_stats(ModelComponent::TextEncoder);
    std::printf("  %s: UNet packed %d reused %d; text encoder packed %d reused %d\n",
                m->loras()[0].name.c_str(), u.packed, u.reused, t.packed, t.reused);
    EXPECT_EQ(u.packed + u.reused, unet_layers);
    EXPECT_EQ(t.packed + t.reused, te_layers);
    EXPECT_GE(u.packed, 1);
    EXPECT_LE(u.packed, unet_params);  // fused q/k/v: one packed layer for up to three parameters
    EXPECT_GE(t.packed, 1);
    EXPECT_LE(t.packed, te_params);
    EXPECT_EQ(m->base_model(), base);
  };
  auto kohya = StableDiffusionModel::with_loras(base, {{lora_file("kohya"), 1.0f}});
  check(kohya, 11, 4);
  test::expect_parity("switched to kohya unet", unet_output(*kohya), goldens()->to_f32("unet_kohya"));
  // Switching from the LoRA model: the new set is applied to its base, not on top of kohya.
  auto old = StableDiffusionModel::with_loras(kohya, {{lora_file("diffusers_old"), 1.0f}});
  check(old, 4, 2);
  EXPECT_TRUE(bit_identical(unet_output(*old), unet_output(*load({{lora_file("diffusers_old"), 1.0f}}))));
  test::expect_parity("switched to diffusers_old text encoder", text_encoder_output(*old),
                      goldens()->to_f32("text_encoder_diffusers_old"));
  EXPECT_EQ(StableDiffusionModel::with_loras(old, {}), base);
  EXPECT_EQ(&old->vae(), &base->vae());
}

TEST(Lora, WithTheWeightCache) {
  ModelLoadOptions o;
  o.weight_cache_dir = test::temp_dir("lora_weight_cache");
  auto first = StableDiffusionModel::load(test::tiny_sd_dir(), o);  // packs into the cache
  first->wait_for_weight_caches();
  o.loras = {{lora_file("kohya_ldm"), 1.0f}};
  auto m = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  ASSERT_TRUE(m->base_model()->loaded_from_cache(ModelComponent::UNet));
  const PackedLayerStats base = m->base_model()->packed_layer_stats(ModelComponent::UNet);
  const PackedLayerStats u = m->packed_layer_stats(ModelComponent::UNet);
  std::printf("base from cache: %d layers mapped, %d packed; with the LoRA: %d packed, %d shared\n", base.from_cache,
              base.packed, u.packed, u.reused);
  EXPECT_EQ(base.packed, 0);
  EXPECT_EQ(u.packed + u.reused, base.from_cache);
  EXPECT_LE(u.packed, 11);
  test::expect_parity("kohya_ldm unet (weight cache)", unet_output(*m), goldens()->to_f32("unet_kohya_ldm"));
  // The cache keeps the checkpoint's own weights: a plain load from it is the base model.
  o.loras.clear();
  test::expect_parity("base unet from the cache after a LoRA load", unet_output(*StableDiffusionModel::load(test::tiny_sd_dir(), o)),
                      goldens()->to_f32("unet_base"));
}

TEST(Lora, Bf16Model) {
  auto m = StableDiffusionModel::load(test::tiny_sd_dir(), no_cache({{lora_file("kohya"), 1.0f}}, ComputeDType::BF16));
  // bf16 weights and products: the bar of the bf16 UNet parity test (tests/engine/models/bf16_test.cpp).
  test::expect_parity("bf16 kohya unet", unet_output(*m), goldens()->to_f32("unet_kohya"), 2e-2);
  test::expect_parity("bf16 kohya text encoder (float32)", text_encoder_output(*m), goldens()->to_f32("text_encoder_kohya"));
}

TEST(Lora, RefusedFilesNameTheFileAndLeaveNoModel) {
  // A checkpoint given as a LoRA.
  const fs::path checkpoint = test::tiny_sd_dir() / "unet" / "diffusion_pytorch_model.safetensors";
  const std::string e = error_of([&] { load({{checkpoint, 1.0f}}); });
  std::printf("checkpoint as a LoRA: %s\n", e.c_str());
  EXPECT_NE(e.find("diffusion_pytorch_model.safetensors"), std::string::npos);
  EXPECT_NE(e.find("not part of a LoRA"), std::string::npos);
  const std::string missing = error_of([&] { load({{lora_dir() / "nope.safetensors", 1.0f}}); });
  EXPECT_NE(missing.find("nope.safetensors"), std::string::npos) << missing;
  const std::string nan = error_of([&] { load({{lora_file("kohya"), NAN}}); });
  EXPECT_NE(nan.find("strength"), std::string::npos) << nan;
}

TEST(Lora, ParseLoraArgument) {
  LoraSpec a = parse_lora_argument("dir/x.safetensors:0.8");
  EXPECT_EQ(a.path, "dir/x.safetensors");
  EXPECT_FLOAT_EQ(a.strength, 0.8f);
  LoraSpec b = parse_lora_argument("dir/x.safetensors");
  EXPECT_EQ(b.path, "dir/x.safetensors");
  EXPECT_FLOAT_EQ(b.strength, 1.0f);
  EXPECT_FLOAT_EQ(parse_lora_argument("x.safetensors:-1.5").strength, -1.5f);
  EXPECT_EQ(parse_lora_argument("C:/a:b/x.safetensors").path, "C:/a:b/x.safetensors");
  EXPECT_NE(error_of([] { parse_lora_argument("x.safetensors:strong"); }).find("not a strength"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_argument("x.safetensors:nan"); }).find("not a strength"), std::string::npos);
}

TEST(Lora, PromptSyntax) {
  PromptLoras p = extract_prompt_loras(
      {"a cat <lora:kohya:0.8> on a mat", "<lora:peft> a dog", "plain prompt", "again <lora:kohya:0.8>"}, lora_dir());
  ASSERT_EQ(p.prompts.size(), 4u);
  EXPECT_EQ(p.prompts[0], "a cat on a mat");
  EXPECT_EQ(p.prompts[1], "a dog");
  EXPECT_EQ(p.prompts[2], "plain prompt");
  EXPECT_EQ(p.prompts[3], "again");
  ASSERT_EQ(p.loras.size(), 2u);
  EXPECT_EQ(p.loras[0].path, lora_file("kohya"));
  EXPECT_FLOAT_EQ(p.loras[0].strength, 0.8f);
  EXPECT_EQ(p.loras[1].path, lora_file("peft"));
  EXPECT_FLOAT_EQ(p.loras[1].strength, 1.0f);
  // Untouched without tags (whitespace and all).
  EXPECT_EQ(extract_prompt_loras({"  spaced  out "}, "").prompts[0], "  spaced  out ");

  const std::string unknown = error_of([] { extract_prompt_loras({"x <lora:missing:1>"}, lora_dir()); });
  std::printf("unknown: %s\n", unknown.c_str());
  EXPECT_NE(unknown.find("missing.safetensors"), std::string::npos);
  EXPECT_NE(unknown.find("kohya_ldm"), std::string::npos);  // lists what the folder has
  const std::string bad = error_of([] { extract_prompt_loras({"<lora:kohya:lots>"}, lora_dir()); });
  EXPECT_NE(bad.find("'lots' is not a number"), std::string::npos) << bad;
  EXPECT_NE(error_of([] { extract_prompt_loras({"<lora:kohya:1:2>"}, lora_dir()); }).find("only <lora:NAME>"),
            std::string::npos);
  EXPECT_NE(error_of([] { extract_prompt_loras({"<lora:kohya:1>", "<lora:kohya:0.5>"}, lora_dir()); }).find("strengths"),
            std::string::npos);
  EXPECT_NE(error_of([] { extract_prompt_loras({"<lora:kohya>"}, ""); }).find("--lora-dir"), std::string::npos);
  EXPECT_NE(error_of([] { extract_prompt_loras({"<lora:../tiny-sd-lora/kohya>"}, lora_dir()); }).find("without '/'"),
            std::string::npos);
}
