// A batch that repeats a sample at the same timestep (classifier-free guidance's two halves)
// runs the UNet's text-free first layers once per distinct sample; every output must still be
// the bits of that sample evaluated on its own, in float32 and in bf16.
#include <gtest/gtest.h>

#include <cstring>

#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;

namespace {

UNet2DCondition tiny_unet(kernels::Precision precision) {
  const auto dir = test::tiny_sd_dir() / "unet";
  auto w = weights_from_safetensors({dir / "diffusion_pytorch_model.safetensors"}, "unet");
  return UNet2DCondition::load(*w, UNetConfig::from_json(read_text_file(dir / "config.json"), "config.json"),
                               precision);
}

class UNetSharedPrefix : public ::testing::TestWithParam<kernels::Precision> {};

}  // namespace

TEST_P(UNetSharedPrefix, RepeatedSamplesGiveTheBitsOfTheirOwnEvaluation) {
  const UNet2DCondition unet = tiny_unet(GetParam());
  auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "unet.safetensors");
  const Tensor golden_sample = g->to_f32("sample"), golden_context = g->to_f32("encoder_hidden_states");
  // Two different latents (the golden's first, and it mirrored in sign), three different contexts.
  Tensor two = golden_sample.gather0({0, 0});
  const int64_t per = two.numel() / 2;
  for (int64_t i = 0; i < per; ++i) two[per + i] = -two[i];
  const Tensor sample = two.gather0({0, 1, 0});  // latent 0 twice, as guidance evaluates it
  Tensor context = golden_context.gather0({0, 1, 0});
  for (int64_t i = 0; i < context.numel() / 3; ++i) context.data()[2 * (context.numel() / 3) + i] *= 0.5f;
  const Numerics numerics{Flavour::Flax};

  UNetDebug dbg;
  const Tensor batch = unet.forward(sample, {500, 500, 500}, context, numerics, &dbg);
  EXPECT_EQ(dbg.text_free_samples, 2) << "the repeated sample's first layers were not shared";
  const int64_t out_per = batch.numel() / 3;
  for (int64_t n = 0; n < 3; ++n) {
    UNetDebug one_dbg;
    const Tensor one = unet.forward(sample.slice0(n, n + 1), {500}, context.slice0(n, n + 1), numerics, &one_dbg);
    EXPECT_EQ(one_dbg.text_free_samples, 1);
    EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + n * out_per, out_per * sizeof(float)))
        << "sample " << n << " of the batch differs from its own evaluation";
  }

  // The same latent at two timesteps is two computations.
  UNetDebug t_dbg;
  unet.forward(two.gather0({0, 0}), {500, 400}, context.slice0(0, 2), numerics, &t_dbg);
  EXPECT_EQ(t_dbg.text_free_samples, 2);
}

INSTANTIATE_TEST_SUITE_P(Precisions, UNetSharedPrefix,
                         ::testing::Values(kernels::Precision::F32, kernels::Precision::BF16),
                         [](const auto& info) { return std::string(kernels::precision_name(info.param)); });
