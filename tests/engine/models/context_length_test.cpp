// The UNet's cross-attention takes a text context of any length (chunked prompts: 77 × chunks):
// parity with diffusers on a 154-token context (tests/data/tiny-sd-prompts, made by
// tools/goldens/make_prompt_goldens.py), and a context given twice over (154 tokens) gives the
// result of the context once (softmax over duplicated keys is the same average).
#include <gtest/gtest.h>

#include <cstring>

#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;

namespace {

UNet2DCondition load_unet() {
  const auto dir = test::tiny_sd_dir();
  auto w = weights_from_safetensors({dir / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  auto cfg = UNetConfig::from_json(read_text_file(dir / "unet" / "config.json"), "unet/config.json");
  return UNet2DCondition::load(*w, cfg);
}

// (N, L, C) → (N, 2L, C): every row's tokens twice.
Tensor doubled(const Tensor& context) {
  const int64_t N = context.dim(0), L = context.dim(1), C = context.dim(2);
  Tensor out = Tensor::empty({N, 2 * L, C});
  for (int64_t n = 0; n < N; ++n)
    for (int k = 0; k < 2; ++k)
      std::memcpy(out.data() + (n * 2 * L + k * L) * C, context.data() + n * L * C, sizeof(float) * L * C);
  return out;
}

}  // namespace

TEST(ContextLength, UNetWith154TokensMatchesDiffusers) {
  const UNet2DCondition unet = load_unet();
  const auto g = SafetensorsFile::open(test::data_dir() / "tiny-sd-prompts" / "goldens.safetensors");
  const Tensor sample = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "unet.safetensors")->to_f32("sample");
  const Tensor context = g->to_f32("unet154.context");
  ASSERT_EQ(context.shape(), (Shape{2, 154, 32}));
  const double t = static_cast<double>(g->to_i64("unet154.timestep")[0]);
  const Tensor out = unet.forward(sample, {t, t}, context, Numerics{Flavour::Diffusers});
  test::expect_parity("unet noise_pred, 154-token context", out, g->to_f32("unet154.noise_pred"));
}

TEST(ContextLength, RepeatedContextGivesTheSameNoisePrediction) {
  const UNet2DCondition unet = load_unet();
  const auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "unet.safetensors");
  const Tensor sample = g->to_f32("sample"), context = g->to_f32("encoder_hidden_states");
  ASSERT_EQ(context.dim(1), 77);
  const Tensor once = unet.forward(sample, {500, 500}, context, Numerics{});
  const Tensor twice = unet.forward(sample, {500, 500}, doubled(context), Numerics{});
  test::expect_parity("77 tokens vs the same 77 twice (154)", twice, once, 1e-5);
  // A context with other extra tokens does change the result: they are attended.
  Tensor other = doubled(context);
  const int64_t L = context.dim(1), C = context.dim(2);
  for (int64_t n = 0; n < other.dim(0); ++n)
    for (int64_t i = 0; i < L * C; ++i) other.data()[(n * 2 * L + L) * C + i] *= -1.0f;  // the second copy
  const Tensor changed = unet.forward(sample, {500, 500}, other, Numerics{});
  const test::Diff d = test::diff(changed, once);
  std::printf("[context] other extra tokens change noise_pred by max %.3e\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-3);
}
