// SDXL inpainting on tiny random SDXL models.
//  - Parity with diffusers' StableDiffusionXLInpaintPipeline (tests/data/tiny-sdxl-inpaint/goldens,
//    made by tools/goldens/make_sdxl_inpaint_goldens.py) under --compat diffusers, every random draw
//    injected: a tiny 9-channel SDXL inpainting UNet (Euler strength 1 and 0.75) and tiny-sdxl's
//    4-channel UNet with the legacy blend (the same, and one init image + mask for every device).
//    8 steps, guidance 5, 2 devices × 1; f32 latents and images at the parity bar, errors printed.
//  - The first UNet input ([scaled latents, mask, masked-image latents]) and the latent mask.
//  - Only masked (diffusers' padding_mask_crop), and the Flax draws of a 9-channel run.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "kernels/tensor_ops.h"
#include "pipeline/image_to_image.h"
#include "pipeline/inpaint.h"
#include "pipeline/sdxl_prompt_encoding.h"
#include "pipeline/sharded_pipeline.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 8, kH = 64, kW = 32, kh = 32, kw = 16;

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
fs::path inpaint_dir() { return test::data_dir() / "tiny-sdxl-inpaint"; }

std::shared_ptr<const StableDiffusionModel> load_with_encoder(const fs::path& dir) {
  ModelLoadOptions o;
  o.load_vae_encoder = true;
  return StableDiffusionModel::load(dir, o);
}
std::shared_ptr<const StableDiffusionModel> model9() {
  static auto m = load_with_encoder(inpaint_dir());
  return m;
}
std::shared_ptr<const StableDiffusionModel> model4() {
  static auto m = load_with_encoder(sdxl_dir());
  return m;
}

const SafetensorsFile& goldens() {
  static auto f = SafetensorsFile::open(inpaint_dir() / "goldens" / "inpaint.safetensors");
  return *f;
}
std::vector<Image8> init_images() { return test::golden_init_images(sdxl_dir()); }
std::vector<Image8> masks() {
  return {read_png(inpaint_dir() / "goldens" / "mask_0.png"), read_png(inpaint_dir() / "goldens" / "mask_1.png")};
}
Tensor golden5(const std::string& name) { return goldens().to_f32(name).reshaped({2, 1, 4, kh, kw}); }

struct Case {
  const char* golden;
  double strength;
  bool nine;               // the 9-channel UNet, else tiny-sdxl's 4-channel one
  bool one_image = false;  // init image 0 and mask 0 for every device
};

// The goldens' request: 2 devices × 1 image, tiny-sdxl's pipeline prompts, everything injected.
GenerationRequest golden_request(const Case& c) {
  const nlohmann::json s = test::golden_settings(sdxl_dir());
  GenerationRequest req = test::golden_prompts_request(s);
  req.steps = kSteps;
  req.guidance_scale = s["guidance"].get<double>();
  req.init_images = init_images();
  req.masks = masks();
  if (c.one_image) {
    req.init_images.resize(1);
    req.masks.resize(1);
  }
  req.strength = c.strength;
  req.latents = golden5("noise");
  req.posterior_noise = golden5("posterior_noise");
  if (c.nine) req.masked_posterior_noise = golden5("masked_posterior_noise");
  return req;
}

std::string case_name(const Case& c) { return test::param_name(c.golden); }

// (B, h, w, C) NHWC → (B, C, h, w).
Tensor nchw(const Tensor& x) {
  Tensor out = Tensor::empty({x.dim(0), x.dim(3), x.dim(1), x.dim(2)});
  kernels::nhwc_to_nchw(x.data(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), out.data());
  return out;
}

class SdxlInpaintParity : public ::testing::TestWithParam<Case> {};

TEST_P(SdxlInpaintParity, MatchesDiffusers) {
  const Case c = GetParam();
  const std::string name = c.golden;
  ShardedPipeline pipe(c.nine ? model9() : model4());
  const GenerationRequest req = golden_request(c);
  const GenerationResult res = pipe.run(req);
  EXPECT_TRUE(res.signature.inpaint);
  EXPECT_EQ(res.signature.scheduler, SchedulerKind::Euler);  // the folder's
  const auto timesteps = goldens().to_f64(goldens().get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;
  const std::array<float, 6> ids = sdxl_time_ids(req.sdxl_size, res.signature.height, res.signature.width);
  const Tensor want_ids = goldens().to_f32(name + ".time_ids");
  for (int64_t k = 0; k < want_ids.numel(); ++k) EXPECT_EQ(ids[k % 6], want_ids[k]) << name << " time id " << k;
  test::expect_parity("sdxl inpaint " + name + " final latents", res.final_latents.reshaped({2, 4, kh, kw}),
                      goldens().to_f32(name + ".latents_final"));
  test::expect_parity("sdxl inpaint " + name + " images", res.images.reshaped({2, kH, kW, 3}),
                      goldens().to_f32(name + ".images"));
}

INSTANTIATE_TEST_SUITE_P(NineAndFourChannels, SdxlInpaintParity,
                         ::testing::Values(Case{"ch9_euler_s1", 1.0, true}, Case{"ch9_euler_s0.75", 0.75, true},
                                           Case{"ch4_euler_s1", 1.0, false}, Case{"ch4_euler_s0.75", 0.75, false},
                                           Case{"ch4_euler_s0.75_one", 0.75, false, true}),
                         [](const auto& info) { return case_name(info.param); });

TEST(SdxlInpaintModel, NineChannelSdxlLoadsAndNeedsAMask) {
  auto m = model9();
  EXPECT_TRUE(m->is_sdxl());
  EXPECT_EQ(m->unet().config().in_channels, 9);
  EXPECT_TRUE(m->unet().config().text_time());
  ShardedPipeline pipe(m);
  GenerationRequest req = golden_request({"ch9_euler_s1", 1.0, true});
  req.masks.clear();
  req.masked_posterior_noise.reset();
  try {
    pipe.resolve(req);
    ADD_FAILURE() << "a 9-channel SDXL UNet ran without a mask";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inpainting model"), std::string::npos) << e.what();
  }
}

// The start of the 9-channel path: [scale_model_input(latents), mask, masked-image latents] of the
// first UNet call (Euler divides the latents by sqrt(σ² + 1)), both halves of the guided batch.
TEST(SdxlInpaintStages, FirstUNetInputAndLatentMaskMatchDiffusers) {
  auto model = model9();
  ShardedPipeline pipe(model);
  for (const Case c : {Case{"ch9_euler_s1", 1.0, true}, Case{"ch9_euler_s0.75", 0.75, true}}) {
    const ResolvedRequest r = pipe.resolve(golden_request(c));
    auto scheduler = Scheduler::create(SchedulerKind::Euler, model->scheduler_config(SchedulerKind::Euler),
                                       SchedulerSemantics::Diffusers);
    const SchedulerState state = scheduler->set_timesteps_for_strength(kSteps, c.strength);
    const Tensor want = goldens().to_f32(std::string(c.golden) + ".unet_input0");  // (4, 9, h, w): [uncond; cond]
    for (int d = 0; d < 2; ++d) {
      const Tensor mask = latent_mask(r.inpaint.mask_for(d).binary, kh, kw, Compat::Diffusers);
      test::expect_close_abs(cat("sdxl latent mask ", d), mask.reshaped({1, 1, kh, kw}),
                             goldens().to_f32("mask_latent").slice0(d, d + 1), 0.0);
      InpaintStartInputs in;
      in.vae = &model->vae();
      in.scheduler = scheduler.get();
      in.state = &state;
      in.compat = Compat::Diffusers;
      in.strength = c.strength;
      in.images = device_init_images(r.init_images, d, 1);
      in.noise = goldens().to_f32("noise").slice0(d, d + 1);
      in.image_eps = goldens().to_f32("posterior_noise").slice0(d, d + 1);
      in.masked_eps = goldens().to_f32("masked_posterior_noise").slice0(d, d + 1);
      in.mask = &r.inpaint.mask_for(d);
      Tensor start;
      const InpaintDevice dev = start_inpaint_device(in, &start);
      const Tensor scaled = scheduler->scale_model_input(state, start, state.begin_index);
      Tensor input = Tensor::empty({1, kh, kw, 9});
      kernels::concat_channels_nhwc(scaled.data(), 4, dev.extra_channels.data(), 5, kh * kw, input.data());
      for (int half : {0, 2})
        test::expect_parity(cat("sdxl ", c.golden, " first UNet input, device ", d, " half ", half / 2), nchw(input),
                            want.slice0(half + d, half + d + 1));
    }
  }
}

// Only masked = diffusers' padding_mask_crop (one diffusers run per image): crop box, inpaint at
// the full size, paste back; diffusers composites in 8 bits (PIL), Octodiff in float32: compared
// as 8-bit levels, as for SD.
TEST(SdxlInpaintOptions, OnlyMaskedMatchesDiffusersPaddingMaskCrop) {
  ShardedPipeline pipe(model4());
  GenerationRequest req = golden_request({"ch4_euler_s0.75", 0.75, false});
  req.inpaint_only_masked = true;
  req.only_masked_padding = 2;
  const ResolvedRequest r = pipe.resolve(req);
  for (int d = 0; d < 2; ++d) {
    const CropBox& b = r.inpaint.mask_for(d).box;
    EXPECT_EQ((std::vector<double>{double(b.x1), double(b.y1), double(b.x2), double(b.y2)}),
              goldens().to_f64(goldens().get(cat("pad2.crop.", d))));
  }
  const GenerationResult res = pipe.run(req);
  Tensor ours = res.images.reshaped({2, kH, kW, 3}).clone();
  for (int d = 0; d < 2; ++d) {
    const Image8 u8 = to_uint8(ours.data() + d * kH * kW * 3, kH, kW);
    for (int k = 0; k < kH * kW * 3; ++k) ours[d * kH * kW * 3 + k] = u8.rgb[k];
  }
  Tensor want = goldens().to_f32("pad2.images");
  for (float& v : want) v = std::nearbyint(v * 255.0f);
  test::expect_close_abs("sdxl only-masked (padding 2) images vs diffusers, 8-bit levels", ours, want, 1.0);
}

// Mask blur pastes the result over the init image with the blurred mask as alpha: pixels the
// blurred mask leaves black are the init image's exactly.
TEST(SdxlInpaintOptions, BlurKeepsTheInitImageOutsideTheMask) {
  ShardedPipeline pipe(model9());
  GenerationRequest req = golden_request({"ch9_euler_s0.75", 0.75, true});
  req.mask_blur = 2;
  const ResolvedRequest r = pipe.resolve(req);
  const GenerationResult res = pipe.run(req);
  const auto inits = init_images();
  for (int d = 0; d < 2; ++d) {
    const PreparedMask& m = r.inpaint.mask_for(d);
    int kept = 0, repainted = 0;
    for (int p = 0; p < kH * kW; ++p) {
      const float* px = res.images.data() + (int64_t{d} * kH * kW + p) * 3;
      if (m.paste_alpha.values[p] == 0) {
        for (int ch = 0; ch < 3; ++ch) ASSERT_EQ(px[ch], inits[d].rgb[p * 3 + ch] / 255.0f) << d << " " << p;
        ++kept;
      } else if (m.paste_alpha.values[p] == 255) {
        repainted += std::abs(px[0] - inits[d].rgb[p * 3] / 255.0f) > 1e-3f;
      }
    }
    std::printf("[sdxl inpaint blur 2] device %d: %d pixels kept, %d repainted pixels changed\n", d, kept, repainted);
    EXPECT_GT(kept, 0);
    EXPECT_GT(repainted, 0);
  }
}

// Flax (the SD 1.x Flax inpaint rules with SDXL's conditioning): noise = normal(key_d) NCHW, the
// init image's ε = normal(key_d) NHWC, the masked image's ε = normal(split(key_d)[1]) NHWC. A run
// that draws them equals a run given them, computed here.
TEST(SdxlInpaintFlax, DrawsFromTheDeviceKeyAndItsSplit) {
  ShardedPipeline pipe(model9());
  GenerationRequest req = golden_request({"ch9_euler_s0.75", 0.75, true});
  req.compat = Compat::Flax;
  req.seed = 57;
  req.latents.reset();
  req.posterior_noise.reset();
  req.masked_posterior_noise.reset();
  const GenerationResult drawn = pipe.run(req);
  EXPECT_EQ(drawn.model_calls, 6);

  const test::FlaxDraws expected = test::flax_device_draws(57, 2, kh, kw);
  test::expect_close_abs("sdxl flax inpaint noise = normal(key_d)", drawn.initial_latents, expected.noise, 0.0);
  req.latents = expected.noise;
  req.posterior_noise = expected.posterior_eps;
  req.masked_posterior_noise = expected.masked_eps;
  test::expect_close_abs("sdxl flax inpaint drawn vs given final latents", pipe.run(req).final_latents,
                         drawn.final_latents, 0.0);
}

}  // namespace
