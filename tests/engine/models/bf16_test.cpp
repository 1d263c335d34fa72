// The networks loaded with kernels::Precision::BF16 (bf16 weights, bf16 products, float32 sums and
// activations) against diffusers' float32 goldens on the tiny model: close to them at bf16's
// accuracy, measurably different from our float32 path (so bf16 really ran), and bit-identical
// for any thread count. Every comparison prints its max abs error.
#include <gtest/gtest.h>

#include "core/device.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/autoencoder_kl.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using kernels::Precision;

fs::path model_dir() {
  return test::tiny_sd_dir();
}
std::shared_ptr<SafetensorsFile> golden(const std::string& name) {
  return SafetensorsFile::open(model_dir() / "goldens" / name);
}

UNet2DCondition load_unet(Precision precision) {
  auto w = weights_from_safetensors({model_dir() / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  auto cfg = UNetConfig::from_json(read_text_file(model_dir() / "unet" / "config.json"), "unet/config.json");
  return UNet2DCondition::load(*w, cfg, precision);
}

AutoencoderKL load_vae(Precision precision) {
  auto w = weights_from_safetensors({model_dir() / "vae" / "diffusion_pytorch_model.safetensors"}, "vae");
  auto cfg = VaeConfig::from_json(read_text_file(model_dir() / "vae" / "config.json"), "vae/config.json");
  return AutoencoderKL::load(*w, cfg, /*with_encoder=*/true, precision);
}

}  // namespace

TEST(Bf16Models, UNetNearFloat32Goldens) {
  UNet2DCondition bf16 = load_unet(Precision::BF16), f32 = load_unet(Precision::F32);
  EXPECT_EQ(bf16.precision(), Precision::BF16);
  auto g = golden("unet.safetensors");
  Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  Tensor noise = g->to_f32("noise_pred");
  auto ts = g->to_i64("timesteps");
  for (size_t k = 0; k < ts.size(); ++k) {
    const double t = static_cast<double>(ts[k]);
    const int64_t kk = static_cast<int64_t>(k);
    Tensor out = bf16.forward(sample, {t, t}, context, Numerics{Flavour::Diffusers});
    Tensor ref = noise.slice0(kk, kk + 1).reshaped(out.shape());
    // bf16 keeps 8 significant bits: a few 1e-3 of the output scale through the network.
    test::expect_parity("bf16 unet noise_pred t=" + std::to_string(ts[k]), out, ref, 2e-2);
    Tensor ours_f32 = f32.forward(sample, {t, t}, context, Numerics{Flavour::Diffusers});
    const test::Diff d = test::diff(out, ours_f32);
    std::printf("[bf16] unet t=%lld: bf16 vs our f32 max_abs_diff=%.3e (max|x|=%.3e)\n",
                static_cast<long long>(ts[k]), d.max_abs, d.ref_scale);
    EXPECT_GT(d.max_abs, 1e-5) << "bf16 products should differ from float32";
  }
}

TEST(Bf16Models, VaeDecodeAndEncodeNearFloat32Goldens) {
  AutoencoderKL vae = load_vae(Precision::BF16);
  EXPECT_EQ(vae.precision(), Precision::BF16);
  auto g = golden("vae.safetensors");
  test::expect_parity("bf16 vae decode", vae.decode(g->to_f32("latents_unscaled")), g->to_f32("decoded"),
                      2e-2);
  test::expect_parity("bf16 vae encoder moments", vae.encode_moments(g->to_f32("image")),
                      g->to_f32("moments"), 2e-2);
}

TEST(Bf16Models, ResultsDoNotDependOnThreadCount) {
  UNet2DCondition unet = load_unet(Precision::BF16);
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
