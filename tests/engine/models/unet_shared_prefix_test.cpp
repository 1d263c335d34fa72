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

// An LCM-distilled UNet's time embedding also depends on timestep_cond: the same latent at the
// same timestep with two guidance embeddings is two computations, with equal ones it is shared,
// and either way every output is the bits of its own evaluation.
TEST_P(UNetSharedPrefix, TimestepCondTakesPartInWhatIsShared) {
  const auto dir = test::data_dir() / "tiny-lcm" / "unet";
  auto w = weights_from_safetensors({dir / "diffusion_pytorch_model.safetensors"}, "unet");
  const UNet2DCondition unet = UNet2DCondition::load(
      *w, UNetConfig::from_json(read_text_file(dir / "config.json"), "config.json"), GetParam());
  auto g = SafetensorsFile::open(test::data_dir() / "tiny-lcm" / "goldens" / "unet.safetensors");
  const Tensor sample = g->to_f32("sample").gather0({0, 0, 0});
  const Tensor context = g->to_f32("encoder_hidden_states").gather0({0, 1, 1});
  const Tensor cond = lcm_guidance_embedding({8.0, 8.0, 1.5}, unet.config().time_cond_proj_dim);
  const Numerics numerics{Flavour::Diffusers};

  UNetDebug dbg;
  const Tensor batch = unet.forward(sample, {500, 500, 500}, context, &cond, numerics, &dbg);
  EXPECT_EQ(dbg.text_free_samples, 2) << "rows 0 and 1 share their condition; row 2 has its own";
  const int64_t out_per = batch.numel() / 3;
  for (int64_t n = 0; n < 3; ++n) {
    const Tensor one_cond = cond.slice0(n, n + 1).clone();
    const Tensor one =
        unet.forward(sample.slice0(n, n + 1), {500}, context.slice0(n, n + 1), &one_cond, numerics);
    EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + n * out_per, out_per * sizeof(float)))
        << "sample " << n << " of the batch differs from its own evaluation";
  }
  // Rows 1 and 2 differ only by their condition, and the condition shows in the output.
  EXPECT_NE(0, std::memcmp(batch.data() + out_per, batch.data() + 2 * out_per, out_per * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Precisions, UNetSharedPrefix,
                         ::testing::Values(kernels::Precision::F32, kernels::Precision::BF16),
                         [](const auto& info) { return std::string(kernels::precision_name(info.param)); });
