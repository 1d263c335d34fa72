// Guided pairs (models/layers.h: ScopedGuidedPairs) on the tiny UNet in bf16: a classifier-free
// guided call's two halves (the same latents with the negative and with the positive prompt)
// computed as pairs keep c − u precise, so the guided noise u + 7.5·(c − u) lands closer to
// float32's; the unconditional half is the same to the bit; nothing depends on the thread count
// or the MLP's block size; float32 layers and batches of another size are untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "core/device.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/layers.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;

namespace {

using kernels::Precision;

UNet2DCondition load_unet(Precision precision) {
  const auto dir = test::tiny_sd_dir();
  auto w = weights_from_safetensors({dir / "unet" / "diffusion_pytorch_model.safetensors"}, "unet");
  auto cfg = UNetConfig::from_json(read_text_file(dir / "unet" / "config.json"), "unet/config.json");
  return UNet2DCondition::load(*w, cfg, precision);
}

struct GuidedInput {
  Tensor sample;   // (2, 4, 32, 32): golden sample 0 twice
  Tensor context;  // (2, 77, 32): the goldens' two prompts, the first as the negative
};

const GuidedInput& guided_input() {
  static const GuidedInput in = [] {
    auto g = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "unet.safetensors");
    const Tensor s = g->to_f32("sample").slice0(0, 1);
    Tensor both = Tensor::empty({2, s.dim(1), s.dim(2), s.dim(3)});
    std::memcpy(both.data(), s.data(), sizeof(float) * s.numel());
    std::memcpy(both.data() + s.numel(), s.data(), sizeof(float) * s.numel());
    return GuidedInput{both, g->to_f32("encoder_hidden_states")};
  }();
  return in;
}

// The UNet's noise for the pair (batch 2), with pairs on (batch 2) or off (0).
Tensor noise(const UNet2DCondition& unet, double t, int64_t pairs_batch, Numerics numerics = Numerics{}) {
  const ScopedGuidedPairs pairs(pairs_batch);
  return unet.forward(guided_input().sample, {t, t}, guided_input().context, numerics);
}

Tensor guided(const Tensor& eps, float g = 7.5f) {
  const int64_t n = eps.numel() / 2;
  Tensor out = Tensor::empty({n});
  for (int64_t k = 0; k < n; ++k) out[k] = eps[k] + g * (eps[n + k] - eps[k]);
  return out;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

}  // namespace

TEST(GuidedPairs, GuidedNoiseOfABf16UNetIsCloserToFloat32) {
  const UNet2DCondition bf16 = load_unet(Precision::BF16), f32 = load_unet(Precision::F32);
  for (double t : {999.0, 500.0, 17.0}) {
    const Tensor reference = guided(noise(f32, t, 0));
    const test::Diff plain = test::diff(guided(noise(bf16, t, 0)), reference);
    const test::Diff paired = test::diff(guided(noise(bf16, t, 2)), reference);
    std::printf("[guided-pairs] t=%g guided noise vs f32: rounded halves %.3e, pairs %.3e (scale %.3e)\n", t,
                plain.max_abs, paired.max_abs, plain.ref_scale);
    // The halves' independent roundings are amplified by the guidance (−6.5 and 7.5): pairs must
    // remove most of that, leaving about one half's rounding.
    EXPECT_LT(paired.max_abs, 0.6 * plain.max_abs) << "t=" << t;
  }
}

TEST(GuidedPairs, TheUnconditionalHalfIsUnchangedToTheBit) {
  const UNet2DCondition bf16 = load_unet(Precision::BF16);
  const Tensor off = noise(bf16, 500.0, 0), on = noise(bf16, 500.0, 2);
  EXPECT_TRUE(bit_identical(off.slice0(0, 1), on.slice0(0, 1)));
  EXPECT_FALSE(bit_identical(off.slice0(1, 2), on.slice0(1, 2)));  // the pairs really ran
}

TEST(GuidedPairs, BitIdenticalForAnyThreadCountAndMlpBlock) {
  const UNet2DCondition bf16 = load_unet(Precision::BF16);
  Tensor one;
  {
    DeviceScope scope(DeviceContext{0, 1});
    one = noise(bf16, 500.0, 2);
  }
  for (int threads : {2, 3}) {
    DeviceScope scope(DeviceContext{0, threads});
    EXPECT_TRUE(bit_identical(noise(bf16, 500.0, 2), one)) << threads << " threads";
  }
  for (int64_t block : {int64_t{0}, int64_t{7}, int64_t{100}}) {
    Numerics n;
    n.mlp_rows_per_block = block;
    EXPECT_TRUE(bit_identical(noise(bf16, 500.0, 2, n), one)) << "MLP block " << block;
  }
}

TEST(GuidedPairs, Float32LayersAndOtherBatchSizesAreUntouched) {
  const UNet2DCondition f32 = load_unet(Precision::F32), bf16 = load_unet(Precision::BF16);
  EXPECT_TRUE(bit_identical(noise(f32, 500.0, 2), noise(f32, 500.0, 0)));
  EXPECT_TRUE(bit_identical(noise(bf16, 500.0, 4), noise(bf16, 500.0, 0)));  // the batch is 2, not 4
}
