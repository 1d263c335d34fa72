// SDXL's networks against diffusers 0.31 (PyTorch, fp32 CPU) on the tiny random SDXL
// (tests/data/tiny-sdxl, made by tools/goldens/make_tiny_sdxl.py): the second text tower
// (CLIPTextModelWithProjection, against the script's torch reference, itself checked on tiny-sd's
// transformers goldens), the text_time UNet and the VAE, in the `diffusers` numerics flavour.
// Every comparison prints its max abs error.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_projection.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
std::shared_ptr<SafetensorsFile> golden(const std::string& name) {
  return SafetensorsFile::open(sdxl_dir() / "goldens" / name);
}

ClipTextConfig text_encoder_2_config() {
  return ClipTextConfig::from_json(read_text_file(sdxl_dir() / "text_encoder_2" / "config.json"), "config");
}

ClipTextModelWithProjection load_text_encoder_2() {
  auto w = weights_from_safetensors({sdxl_dir() / "text_encoder_2" / "model.safetensors"}, "text_encoder_2");
  return ClipTextModelWithProjection::load(*w, text_encoder_2_config());
}

UNetConfig unet_config() {
  return UNetConfig::from_json(read_text_file(sdxl_dir() / "unet" / "config.json"), "unet/config.json");
}

UNet2DCondition load_unet() {
  auto w = weights_from_safetensors({sdxl_dir() / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  return UNet2DCondition::load(*w, unet_config());
}

std::vector<int32_t> ids_of(const SafetensorsFile& g, const std::string& name) {
  auto ids64 = g.to_i64(name);
  return std::vector<int32_t>(ids64.begin(), ids64.end());
}

UNetTextTime unet_text_time(const SafetensorsFile& g) { return {g.to_f32("text_embeds"), g.to_f32("time_ids")}; }

}  // namespace

TEST(SdxlParity, ConfigsReadTheSdxlSettings) {
  const ClipTextConfig te2 = text_encoder_2_config();
  EXPECT_EQ(te2.hidden_act, "gelu");
  EXPECT_EQ(te2.projection_dim, 40);
  EXPECT_EQ(te2.eos_token_id, 2);
  const UNetConfig u = unet_config();
  EXPECT_TRUE(u.text_time());
  EXPECT_EQ(u.addition_time_embed_dim, 8);
  EXPECT_EQ(u.projection_class_embeddings_input_dim, 88);
  EXPECT_EQ(u.transformer_layers_per_block, (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(u.num_heads, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(u.cross_attention_dim, 80);
  EXPECT_TRUE(u.use_linear_projection);
  EXPECT_EQ(u.down_block_types[0], "DownBlock2D");
}

TEST(SdxlParity, TextEncoder2HiddenStatesAndTextEmbeds) {
  ClipTextModelWithProjection te = load_text_encoder_2();
  auto g = golden("text_encoder_2.safetensors");
  const std::vector<int32_t> ids = ids_of(*g, "input_ids");  // 4 × 77, padded with "!"
  ClipTextProjectionOutput out = te.forward(ids, 4, 77);
  test::expect_parity("text_encoder_2 penultimate_hidden_state", out.penultimate, g->to_f32("penultimate_hidden_state"));
  test::expect_parity("text_encoder_2 last_hidden_state", out.last_hidden_state, g->to_f32("last_hidden_state"));
  test::expect_parity("text_encoder_2 pooler_output", out.pooled, g->to_f32("pooler_output"));
  test::expect_parity("text_encoder_2 text_embeds", out.text_embeds, g->to_f32("text_embeds"));
  const auto eos = clip_eos_positions(ids, 4, 77, 2);
  const auto ref = g->to_i64("eos_position");
  for (size_t n = 0; n < eos.size(); ++n) EXPECT_EQ(eos[n], ref[n]) << "row " << n;
}

TEST(SdxlParity, TextEncoder2PoolsTheFirstEosWhenPaddedWithEos) {
  // Tokenizer 1's padding (<|endoftext|> repeated): the legacy argmax rule takes the first one.
  ClipTextModelWithProjection te = load_text_encoder_2();
  auto g = golden("text_encoder_2.safetensors");
  ClipTextProjectionOutput out = te.forward(ids_of(*g, "input_ids_eos_padded"), 4, 77);
  test::expect_parity("text_encoder_2 text_embeds (eos-padded ids)", out.text_embeds,
                      g->to_f32("text_embeds_eos_padded"));
}

TEST(SdxlParity, EosPositionRules) {
  // Legacy (eos_token_id 2): the first position of the highest id; else the first eos_token_id.
  const std::vector<int32_t> ids{998, 5, 999, 999, 7, /**/ 998, 999, 4, 3, 0, /**/ 998, 600, 1, 1, 1};
  EXPECT_EQ(clip_eos_positions(ids, 3, 5, 2), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(clip_eos_positions(ids, 3, 5, 999), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(clip_eos_positions(ids, 3, 5, 1), (std::vector<int64_t>{0, 0, 2}));
}

TEST(SdxlParity, TextEncoder2WithoutProjectionIsRefusedNamingTheTensor) {
  const fs::path dir = test::temp_dir("te2_no_projection");
  auto src = SafetensorsFile::open(sdxl_dir() / "text_encoder_2" / "model.safetensors");
  std::vector<std::pair<std::string, Tensor>> kept;
  for (const TensorRecord& t : src->tensors())
    if (t.name != "text_projection.weight") kept.push_back({t.name, src->to_f32(t)});
  write_safetensors_f32(dir / "model.safetensors", kept);
  auto w = weights_from_safetensors({dir / "model.safetensors"}, "text_encoder_2");
  try {
    ClipTextModelWithProjection::load(*w, text_encoder_2_config());
    FAIL() << "loaded a tower without text_projection.weight";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text_projection.weight"), std::string::npos) << e.what();
  }
}

TEST(SdxlParity, UNetWithTextTimeThreeTimesteps) {
  UNet2DCondition unet = load_unet();
  auto g = golden("unet.safetensors");
  const Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  const UNetTextTime text_time = unet_text_time(*g);
  const auto ts = g->to_i64("timesteps");
  const Tensor noise = g->to_f32("noise_pred"), tproj = g->to_f32("time_proj"), temb = g->to_f32("time_embedding");
  const Tensor aug = g->to_f32("add_embedding"), mid = g->to_f32("mid_block_out");
  for (size_t k = 0; k < ts.size(); ++k) {
    UNetDebug dbg;
    const double t = static_cast<double>(ts[k]);
    Tensor out = unet.forward(sample, {t, t}, context, nullptr, Numerics{Flavour::Diffusers}, &dbg, nullptr, &text_time);
    const std::string tag = " t=" + std::to_string(ts[k]);
    const int64_t kk = static_cast<int64_t>(k);
    auto at = [&](const Tensor& all, const Tensor& like) { return all.slice0(kk, kk + 1).reshaped(like.shape()); };
    test::expect_parity("sdxl unet time_proj" + tag, dbg.time_proj, at(tproj, dbg.time_proj));
    test::expect_parity("sdxl unet time_embedding" + tag, dbg.time_embedding, at(temb, dbg.time_embedding));
    test::expect_parity("sdxl unet add_embedding" + tag, dbg.add_embedding, at(aug, dbg.add_embedding));
    test::expect_parity("sdxl unet mid_block_out" + tag, dbg.mid_block_out, at(mid, dbg.mid_block_out));
    test::expect_parity("sdxl unet noise_pred" + tag, out, at(noise, out));
  }
}

TEST(SdxlParity, UNetTextTimeIsRequiredAndChecked) {
  UNet2DCondition unet = load_unet();
  auto g = golden("unet.safetensors");
  const Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  EXPECT_THROW(unet.forward(sample, {500, 500}, context, Numerics{}), Error);  // no text_time
  UNetTextTime five_ids{g->to_f32("text_embeds"), Tensor::zeros({2, 5})};       // 40 + 5 × 8 != 88
  try {
    unet.forward(sample, {500, 500}, context, nullptr, Numerics{}, nullptr, nullptr, &five_ids);
    FAIL() << "took 5 time ids";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_embedding takes 88"), std::string::npos) << e.what();
  }
}

TEST(SdxlParity, UNetWithoutTextTimeRefusesIt) {
  auto w = weights_from_safetensors({test::tiny_sd_dir() / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  const auto cfg =
      UNetConfig::from_json(read_text_file(test::tiny_sd_dir() / "unet" / "config.json"), "unet/config.json");
  UNet2DCondition sd = UNet2DCondition::load(*w, cfg);
  const UNetTextTime text_time{Tensor::zeros({1, 40}), Tensor::zeros({1, 6})};
  EXPECT_THROW(sd.forward(Tensor::zeros({1, 4, 8, 8}), {1}, Tensor::zeros({1, 77, 32}), nullptr, Numerics{}, nullptr,
                          nullptr, &text_time),
               Error);
}

TEST(SdxlParity, UNetConfigRefusesOtherAdditionEmbeddings) {
  const std::string base = read_text_file(sdxl_dir() / "unet" / "config.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_THROW(UNetConfig::from_json(with("\"text_time\"", "\"text_image\""), "c"), Error);
  EXPECT_THROW(UNetConfig::from_json(with("\"addition_time_embed_dim\": 8", "\"addition_time_embed_dim\": null"), "c"),
               Error);
}

TEST(SdxlParity, VaeDecode) {
  auto w = weights_from_safetensors({sdxl_dir() / "vae" / "diffusion_pytorch_model.safetensors"}, "vae");
  const auto cfg = VaeConfig::from_json(read_text_file(sdxl_dir() / "vae" / "config.json"), "vae/config.json");
  EXPECT_DOUBLE_EQ(cfg.scaling_factor, 0.13025);
  AutoencoderKL vae = AutoencoderKL::load(*w, cfg);
  auto g = golden("vae.safetensors");
  test::expect_parity("sdxl vae decode", vae.decode(g->to_f32("latents_unscaled")), g->to_f32("decoded"));
}
