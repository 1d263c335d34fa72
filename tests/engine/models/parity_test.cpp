// Parity of the three networks with diffusers/transformers (PyTorch) on the tiny model's goldens
// (tests/data/tiny-sd/goldens, computed by diffusers 0.31 / transformers 4.48, fp32 CPU), in the
// `diffusers` numerics flavour. Every comparison prints its max abs error.
#include <gtest/gtest.h>

#include "core/device.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path model_dir() { return test::tiny_sd_dir(); }
std::shared_ptr<SafetensorsFile> golden(const std::string& name) {
  return SafetensorsFile::open(model_dir() / "goldens" / name);
}

ClipTextModel load_text_encoder() {
  auto w = weights_from_safetensors({model_dir() / "text_encoder" / "model.safetensors"}, "text_encoder");
  auto cfg = ClipTextConfig::from_json(read_text_file(model_dir() / "text_encoder" / "config.json"), "config");
  return ClipTextModel::load(*w, cfg);
}

UNet2DCondition load_unet() {
  auto w = weights_from_safetensors({model_dir() / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  auto cfg = UNetConfig::from_json(read_text_file(model_dir() / "unet" / "config.json"), "unet/config.json");
  return UNet2DCondition::load(*w, cfg);
}

AutoencoderKL load_vae() {
  auto w = weights_from_safetensors({model_dir() / "vae" / "diffusion_pytorch_model.safetensors"}, "vae");
  auto cfg = VaeConfig::from_json(read_text_file(model_dir() / "vae" / "config.json"), "vae/config.json");
  return AutoencoderKL::load(*w, cfg);
}

}  // namespace

TEST(Parity, TextEncoder) {
  ClipTextModel te = load_text_encoder();
  auto g = golden("text_encoder.safetensors");
  auto ids64 = g->to_i64("input_ids");
  std::vector<int32_t> ids(ids64.begin(), ids64.end());
  ClipTextOutput out = te.forward(ids, 3, 77);
  test::expect_parity("text_encoder last_hidden_state", out.last_hidden_state, g->to_f32("last_hidden_state"));
  test::expect_parity("text_encoder penultimate_hidden_state", out.penultimate,
                      g->to_f32("penultimate_hidden_state"));
}

TEST(Parity, UNetThreeTimesteps) {
  UNet2DCondition unet = load_unet();
  auto g = golden("unet.safetensors");
  Tensor sample = g->to_f32("sample");
  Tensor context = g->to_f32("encoder_hidden_states");
  auto ts = g->to_i64("timesteps");
  Tensor noise = g->to_f32("noise_pred");
  Tensor tproj = g->to_f32("time_proj");
  Tensor temb = g->to_f32("time_embedding");
  Tensor mid = g->to_f32("mid_block_out");
  for (size_t k = 0; k < ts.size(); ++k) {
    UNetDebug dbg;
    const double t = static_cast<double>(ts[k]);
    Tensor out = unet.forward(sample, {t, t}, context, Numerics{Flavour::Diffusers}, &dbg);
    const std::string tag = "t=" + std::to_string(ts[k]);
    const int64_t kk = static_cast<int64_t>(k);
    test::expect_parity("unet time_proj " + tag, dbg.time_proj, tproj.slice0(kk, kk + 1).reshaped(dbg.time_proj.shape()));
    test::expect_parity("unet time_embedding " + tag, dbg.time_embedding,
                        temb.slice0(kk, kk + 1).reshaped(dbg.time_embedding.shape()));
    test::expect_parity("unet mid_block_out " + tag, dbg.mid_block_out,
                        mid.slice0(kk, kk + 1).reshaped(dbg.mid_block_out.shape()));
    test::expect_parity("unet noise_pred " + tag, out, noise.slice0(kk, kk + 1).reshaped(out.shape()));
  }
}

TEST(Parity, VaeDecode) {
  AutoencoderKL vae = load_vae();
  auto g = golden("vae.safetensors");
  Tensor decoded = vae.decode(g->to_f32("latents_unscaled"));
  test::expect_parity("vae decode", decoded, g->to_f32("decoded"));
}

TEST(Parity, VaeEncoderMoments) {
  AutoencoderKL vae = load_vae();
  auto g = golden("vae.safetensors");
  Tensor moments = vae.encode_moments(g->to_f32("image"));
  test::expect_parity("vae encoder moments", moments, g->to_f32("moments"));
}

TEST(Parity, ResultsDoNotDependOnThreadCount) {
  UNet2DCondition unet = load_unet();
  auto g = golden("unet.safetensors");
  Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  Tensor one, two;
  {
    DeviceScope scope(DeviceContext{0, 1, nullptr});
    one = unet.forward(sample, {500, 500}, context, Numerics{});
  }
  {
    DeviceScope scope(DeviceContext{0, 2, nullptr});
    two = unet.forward(sample, {500, 500}, context, Numerics{});
  }
  for (int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(one[i], two[i]) << "element " << i;
}

TEST(Parity, FlaxFlavourDiffersOnlySlightly) {
  // The flax flavour (tanh GELU, eps 1e-5) is a different computation: close, not equal.
  UNet2DCondition unet = load_unet();
  auto g = golden("unet.safetensors");
  Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  Tensor a = unet.forward(sample, {500, 500}, context, Numerics{Flavour::Diffusers});
  Tensor b = unet.forward(sample, {500, 500}, context, Numerics{Flavour::Flax});
  test::Diff diff = test::diff(b, a);
  std::printf("[flavour] flax vs diffusers max_abs_diff=%.3e (max|x|=%.3e)\n", diff.max_abs, diff.ref_scale);
  EXPECT_GT(diff.max_abs, 0.0);
  EXPECT_LT(diff.max_abs, 1e-2 * std::max(1.0, diff.ref_scale));
}
