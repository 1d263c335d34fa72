// LoRAs on SDXL (pipeline/lora.h, StableDiffusionModel::with_loras): random LoRAs for the tiny
// SDXL in each file format — kohya diffusers-named, kohya LDM-named as sd-scripts writes SDXL
// files (transformer_blocks under input_blocks/middle_block/output_blocks), diffusers/PEFT — with
// the UNet, text_encoder (lora_te1_) and text_encoder_2 (lora_te2_), against diffusers with the
// same LoRA fused (tests/data/tiny-sdxl-lora, tools/goldens/make_sdxl_lora_goldens.py): each
// network, the whole StableDiffusionXLPipeline run, two LoRAs with strengths, switching without
// repacking, and SD 1.x LoRAs refused on SDXL. f32 at the parity bar (1e-4 of scale), errors printed.
#include <gtest/gtest.h>

#include <functional>

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

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
fs::path lora_file(const std::string& name) { return test::data_dir() / "tiny-sdxl-lora" / (name + ".safetensors"); }
std::shared_ptr<SafetensorsFile> goldens() {
  return SafetensorsFile::open(test::data_dir() / "tiny-sdxl-lora" / "goldens.safetensors");
}
std::shared_ptr<SafetensorsFile> sdxl_golden(const std::string& name) {
  return SafetensorsFile::open(sdxl_dir() / "goldens" / (name + ".safetensors"));
}

std::shared_ptr<const StableDiffusionModel> load(std::vector<LoraSpec> loras = {}) {
  ModelLoadOptions o;
  o.weight_cache = false;
  o.loras = std::move(loras);
  return StableDiffusionModel::load(sdxl_dir(), o);
}

// The tiny SDXL UNet goldens' inputs at their second timestep.
Tensor unet_output(const StableDiffusionModel& m) {
  auto u = sdxl_golden("unet");
  const double t = static_cast<double>(goldens()->to_i64("timestep").at(0));
  const UNetTextTime text_time{u->to_f32("text_embeds"), u->to_f32("time_ids")};
  return m.unet().forward(u->to_f32("sample"), {t, t}, u->to_f32("encoder_hidden_states"), nullptr,
                          Numerics{Flavour::Diffusers}, nullptr, nullptr, &text_time);
}

std::vector<int32_t> ids(const std::string& name) {
  const auto v = sdxl_golden("pipeline")->to_i64(name);
  return std::vector<int32_t>(v.begin(), v.end());
}

// What SDXL takes from each tower for the pipeline goldens' two prompts.
void expect_towers_match(const StableDiffusionModel& m, const std::string& prefix) {
  auto g = goldens();
  test::expect_parity(prefix + "text_encoder penultimate", m.text_encoder().forward(ids("input_ids"), 2, 77).penultimate,
                      g->to_f32(prefix + "text_encoder"));
  const ClipTextProjectionOutput two = m.text_encoder_2().forward(ids("input_ids_2"), 2, 77);
  test::expect_parity(prefix + "text_encoder_2 penultimate", two.penultimate, g->to_f32(prefix + "text_encoder_2.penultimate"));
  test::expect_parity(prefix + "text_encoder_2 text_embeds", two.text_embeds, g->to_f32(prefix + "text_encoder_2.text_embeds"));
}

// The golden moves far more than the tolerance from the base model's: a LoRA silently not
// applied could not pass.
void expect_lora_moves(const std::string& golden, const std::string& base) {
  auto g = goldens();
  const test::Diff d = test::diff(g->to_f32(golden), g->to_f32(base));
  std::printf("  %s: the LoRA moves diffusers' output by %.3g (scale %.3g)\n", golden.c_str(), d.max_abs, d.ref_scale);
  EXPECT_GT(d.max_abs, 100 * 1e-4 * std::max(1.0, d.ref_scale)) << golden;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SdxlLora, BaseReferenceMatchesTheModel) {
  auto m = load();
  test::expect_parity("sdxl base unet", unet_output(*m), goldens()->to_f32("unet_base"));
  expect_towers_match(*m, "base.");
}

TEST(SdxlLora, EachFormatMatchesDiffusersFused) {
  const std::pair<const char*, const char*> formats[] = {
      {"kohya", "kohya"}, {"kohya_ldm", "kohya + kohya (LDM names)"}, {"peft", "diffusers/PEFT"}};
  for (const auto& [fmt, format] : formats) {
    auto m = load({{lora_file(fmt), 1.0f}});
    ASSERT_EQ(m->loras().size(), 1u);
    const AppliedLora& a = m->loras()[0];
    std::printf("%s: format '%s', %d UNet, %d text_encoder and %d text_encoder_2 parameters\n", fmt, a.format.c_str(),
                a.unet_layers, a.text_encoder_layers, a.text_encoder_2_layers);
    EXPECT_EQ(a.format, format);  // kohya_ldm: its text encoders' modules have no LDM names
    EXPECT_EQ(a.unet_layers, 14);
    EXPECT_EQ(a.text_encoder_layers, 3);
    EXPECT_EQ(a.text_encoder_2_layers, 4);
    EXPECT_TRUE(m->is_sdxl());
    expect_lora_moves(std::string("unet_") + fmt, "unet_base");
    test::expect_parity(std::string(fmt) + " unet", unet_output(*m), goldens()->to_f32(std::string("unet_") + fmt));
    expect_lora_moves(std::string(fmt) + ".text_encoder", "base.text_encoder");
    expect_lora_moves(std::string(fmt) + ".text_encoder_2.penultimate", "base.text_encoder_2.penultimate");
    expect_lora_moves(std::string(fmt) + ".text_encoder_2.text_embeds", "base.text_encoder_2.text_embeds");
    expect_towers_match(*m, std::string(fmt) + ".");
  }
}

TEST(SdxlLora, TwoLorasWithStrengths) {
  auto m = load({{lora_file("kohya_ldm"), 0.7f}, {lora_file("peft"), -0.5f}});
  test::expect_parity("kohya_ldm 0.7 + peft -0.5 unet", unet_output(*m), goldens()->to_f32("unet_kohya_ldm0.7_peft-0.5"));
  expect_towers_match(*m, "kohya_ldm0.7_peft-0.5.");
}

// The whole pipeline (--compat diffusers, the folder's Euler, 5 steps, guidance 5, the tiny-sdxl
// goldens' prompts, negative prompt and initial latents) against StableDiffusionXLPipeline with
// the same LoRAs fused into the UNet and both text encoders.
TEST(SdxlLora, PipelineMatchesDiffusersWithTheLorasFused) {
  const nlohmann::json settings = test::golden_settings(sdxl_dir());
  const Tensor init = sdxl_golden("pipeline")->to_f32("latents_init");
  const std::vector<std::pair<std::string, std::vector<LoraSpec>>> cases = {
      {"base", {}},
      {"kohya", {{lora_file("kohya"), 1.0f}}},
      {"kohya_ldm", {{lora_file("kohya_ldm"), 1.0f}}},
      {"peft", {{lora_file("peft"), 1.0f}}},
      {"kohya_ldm0.7_peft-0.5", {{lora_file("kohya_ldm"), 0.7f}, {lora_file("peft"), -0.5f}}},
  };
  auto g = goldens();
  for (const auto& [name, loras] : cases) {
    ShardedPipeline pipe(load(loras));
    GenerationRequest req = test::golden_prompts_request(settings);
    req.steps = settings["steps"].get<int>();
    req.guidance_scale = settings["guidance"].get<double>();
    req.latents = init.reshaped({2, 1, 4, 16, 16});
    const GenerationResult res = pipe.run(req);
    EXPECT_EQ(res.signature.scheduler, SchedulerKind::Euler);
    const std::string key = "pipeline_" + name;
    if (name != "base") expect_lora_moves(key + ".images", "pipeline_base.images");
    test::expect_parity(key + " final latents", res.final_latents.reshaped({2, 4, 16, 16}), g->to_f32(key + ".latents_final"));
    test::expect_parity(key + " images", res.images.reshaped({2, 32, 32, 3}), g->to_f32(key + ".images"));
  }
}

// Switching LoRAs packs only the layers they touch, in all three networks; the rest is the base's.
TEST(SdxlLora, SwitchingRepacksOnlyTheTouchedLayers) {
  auto base = load();
  int base_layers[4] = {};
  for (ModelComponent c : {ModelComponent::UNet, ModelComponent::TextEncoder, ModelComponent::TextEncoder2})
    base_layers[static_cast<int>(c)] = base->packed_layer_stats(c).packed;
  std::printf("base: %d UNet, %d text_encoder, %d text_encoder_2 packed layers\n", base_layers[1], base_layers[0],
              base_layers[3]);
  ASSERT_GT(base_layers[3], 10);
  auto m = StableDiffusionModel::with_loras(base, {{lora_file("peft"), 1.0f}});
  const std::pair<ModelComponent, int> touched[] = {
      {ModelComponent::UNet, 14}, {ModelComponent::TextEncoder, 3}, {ModelComponent::TextEncoder2, 4}};
  for (const auto& [c, params] : touched) {
    const PackedLayerStats s = m->packed_layer_stats(c);
    std::printf("  component %d: packed %d, reused %d\n", static_cast<int>(c), s.packed, s.reused);
    EXPECT_EQ(s.packed + s.reused, base_layers[static_cast<int>(c)]);
    EXPECT_GE(s.packed, 1);
    EXPECT_LE(s.packed, params);  // fused q/k/v: one packed layer for up to three parameters
  }
  EXPECT_EQ(m->base_model(), base);
  EXPECT_EQ(&m->tokenizer_2(), &base->tokenizer_2());
  EXPECT_EQ(&m->vae(), &base->vae());
  expect_towers_match(*m, "peft.");
  EXPECT_EQ(StableDiffusionModel::with_loras(m, {}), base);
}

// A LoRA made for SD 1.x (tests/data/tiny-sd-lora: tiny-sd's UNet; its text encoder is the tiny
// SDXL's first one) does not fit the SDXL UNet: refused, naming the file and the tensor.
TEST(SdxlLora, Sd1LorasAreRefusedNamingTheFileAndWhatDoesNotFit) {
  for (const char* name : {"kohya", "kohya_ldm", "peft"}) {
    const fs::path file = test::data_dir() / "tiny-sd-lora" / (std::string(name) + ".safetensors");
    const std::string e = error_of([&] { load({{file, 1.0f}}); });
    std::printf("SD 1.x %s LoRA on SDXL: %s\n", name, e.c_str());
    EXPECT_TRUE(contains(e, file.string())) << e;
    EXPECT_TRUE(contains(e, "LoRA tensor 'lora_unet_") || contains(e, "LoRA tensor 'unet.")) << e;
    EXPECT_TRUE(contains(e, "SD 1.x/2.x on this SDXL model")) << e;
  }
  // And an SDXL LoRA on SD 1.x, as before.
  ModelLoadOptions o;
  o.weight_cache = false;
  o.loras = {{lora_file("kohya"), 1.0f}};
  const std::string e = error_of([&] { StableDiffusionModel::load(test::tiny_sd_dir(), o); });
  std::printf("SDXL LoRA on SD 1.x: %s\n", e.c_str());
  EXPECT_TRUE(contains(e, lora_file("kohya").string())) << e;
  EXPECT_TRUE(contains(e, "SDXL") || contains(e, "does not")) << e;
}
