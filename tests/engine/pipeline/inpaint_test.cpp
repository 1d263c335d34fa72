// Inpainting (pipeline/inpaint.h) on tiny models.
//  - Parity with diffusers' StableDiffusionInpaintPipeline (tests/data/tiny-sd-inpaint/goldens,
//    made by tools/goldens/make_inpaint_goldens.py) under --compat diffusers, every random draw
//    injected: the 9-channel tiny UNet (PNDM strength 1 and 0.75, Euler 0.75) and tiny-sd's
//    4-channel UNet with the legacy blend (same cases). 8 steps, guidance 7.5, 2 devices × 1.
//  - The stages against diffusers' tensors: latent mask, masked-image latents, the first UNet input.
//  - Flax semantics (no JAX here): the latent mask by jax.image.resize's nearest rule (computed by
//    the golden script in numpy), the masked-image ε drawn from split(key_d)[1] in NHWC order.
//  - bf16 within 1e-2 of f32; an all-white mask on a 4-channel UNet is image-to-image.
//  - Mask blur, only-masked (crop boxes against diffusers' get_crop_region) and bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "kernels/tensor_ops.h"
#include "pipeline/image_to_image.h"
#include "pipeline/inpaint.h"
#include "pipeline/sharded_pipeline.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::filesystem::path inpaint_dir() { return test::data_dir() / "tiny-sd-inpaint"; }

std::shared_ptr<const StableDiffusionModel> load_model(const std::filesystem::path& dir, ComputeDType dtype) {
  ModelLoadOptions o;
  o.load_vae_encoder = true;
  o.dtype = dtype;
  return StableDiffusionModel::load(dir, o);
}
std::shared_ptr<const StableDiffusionModel> model9(ComputeDType dtype = ComputeDType::F32) {
  static auto f32 = load_model(inpaint_dir(), ComputeDType::F32);
  static std::shared_ptr<const StableDiffusionModel> bf16;
  if (dtype == ComputeDType::F32) return f32;
  if (!bf16) bf16 = load_model(inpaint_dir(), ComputeDType::BF16);
  return bf16;
}
std::shared_ptr<const StableDiffusionModel> model4() {
  static auto m = load_model(test::tiny_sd_dir(), ComputeDType::F32);
  return m;
}

const SafetensorsFile& goldens() {
  static auto f = SafetensorsFile::open(inpaint_dir() / "goldens" / "inpaint.safetensors");
  return *f;
}
std::vector<Image8> init_images() { return test::golden_init_images(test::tiny_sd_dir()); }
std::vector<Image8> masks() {
  return {read_png(inpaint_dir() / "goldens" / "mask_0.png"), read_png(inpaint_dir() / "goldens" / "mask_1.png")};
}
Tensor golden5(const std::string& name) { return goldens().to_f32(name).reshaped({2, 1, 4, 32, 32}); }

// The goldens' request: 2 devices × 1 image, the text-to-image goldens' prompts, everything injected.
GenerationRequest golden_request(SchedulerKind kind, double strength) {
  GenerationRequest req = test::golden_prompts_request(test::golden_settings(test::tiny_sd_dir()));
  req.steps = 8;
  req.guidance_scale = 7.5;
  req.scheduler = kind;
  req.init_images = init_images();
  req.masks = masks();
  req.strength = strength;
  req.latents = golden5("noise");
  req.posterior_noise = golden5("posterior_noise");
  return req;
}

struct Case {
  const char* golden;
  SchedulerKind kind;
  double strength;
  bool nine;  // the 9-channel UNet, else tiny-sd's 4-channel one
};

std::string case_name(const Case& c) { return test::param_name(c.golden); }

class InpaintParity : public ::testing::TestWithParam<Case> {};

TEST_P(InpaintParity, MatchesDiffusers) {
  const Case c = GetParam();
  const std::string name = c.golden;
  ShardedPipeline pipe(c.nine ? model9() : model4());
  GenerationRequest req = golden_request(c.kind, c.strength);
  if (c.nine) req.masked_posterior_noise = golden5("masked_posterior_noise");
  const GenerationResult res = pipe.run(req);
  EXPECT_TRUE(res.signature.inpaint);
  const auto timesteps = goldens().to_f64(goldens().get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;
  test::expect_parity("inpaint " + name + " final latents", res.final_latents.reshaped({2, 4, 32, 32}),
                      goldens().to_f32(name + ".latents_final"));
  test::expect_parity("inpaint " + name + " images", res.images.reshaped({2, 64, 64, 3}),
                      goldens().to_f32(name + ".images"));
}

INSTANTIATE_TEST_SUITE_P(NineAndFourChannels, InpaintParity,
                         ::testing::Values(Case{"ch9_pndm_s1", SchedulerKind::Pndm, 1.0, true},
                                           Case{"ch9_pndm_s0.75", SchedulerKind::Pndm, 0.75, true},
                                           Case{"ch9_euler_s0.75", SchedulerKind::Euler, 0.75, true},
                                           Case{"ch4_pndm_s1", SchedulerKind::Pndm, 1.0, false},
                                           Case{"ch4_pndm_s0.75", SchedulerKind::Pndm, 0.75, false},
                                           Case{"ch4_euler_s0.75", SchedulerKind::Euler, 0.75, false}),
                         [](const auto& info) { return case_name(info.param); });

// (B, h, w, C) NHWC → (B, C, h, w).
Tensor nchw(const Tensor& x) {
  Tensor out = Tensor::empty({x.dim(0), x.dim(3), x.dim(1), x.dim(2)});
  kernels::nhwc_to_nchw(x.data(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), out.data());
  return out;
}

// Pixel masks (D, H, W) as the pipeline resolves them, and their latent masks by `compat`'s rule.
Tensor latent_masks(Compat compat) {
  ShardedPipeline pipe(model9());
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0);
  req.compat = compat;
  const ResolvedRequest r = pipe.resolve(req);
  Tensor out = Tensor::empty({2, 1, 32, 32});
  for (int d = 0; d < 2; ++d) {
    const Tensor m = latent_mask(r.inpaint.mask_for(d).binary, 32, 32, compat);
    std::copy(m.data(), m.data() + m.numel(), out.data() + d * m.numel());
  }
  return out;
}

TEST(InpaintStages, LatentMaskByEachPipelinesNearestRule) {
  const Tensor torch_rule = latent_masks(Compat::Diffusers), jax_rule = latent_masks(Compat::Flax);
  test::expect_close_abs("diffusers latent mask (torch nearest)", torch_rule, goldens().to_f32("mask_latent"), 0.0);
  test::expect_close_abs("flax latent mask (jax nearest)", jax_rule, goldens().to_f32("flax.mask_latent"), 0.0);
  EXPECT_GT(test::diff(torch_rule, jax_rule).max_abs, 0.0) << "the two rules should differ on these masks";
}

// The start of the 9-channel path: [latents, mask, masked-image latents] of the first UNet call
// (PNDM: scale_model_input is the identity, so the first 4 channels are the start latents).
TEST(InpaintStages, FirstUNetInputMatchesDiffusers) {
  auto model = model9();
  ShardedPipeline pipe(model);
  for (const char* name : {"ch9_pndm_s1", "ch9_pndm_s0.75"}) {
    const double strength = std::string(name) == "ch9_pndm_s1" ? 1.0 : 0.75;
    const ResolvedRequest r = pipe.resolve(golden_request(SchedulerKind::Pndm, strength));
    auto scheduler = Scheduler::create(SchedulerKind::Pndm, model->scheduler_config(SchedulerKind::Pndm, std::nullopt),
                                       SchedulerSemantics::Diffusers);
    const SchedulerState state = scheduler->set_timesteps_for_strength(8, strength);
    const Tensor want = goldens().to_f32(std::string(name) + ".unet_input0");  // (4, 9, 32, 32): [uncond; cond]
    for (int d = 0; d < 2; ++d) {
      InpaintStartInputs in;
      in.vae = &model->vae();
      in.scheduler = scheduler.get();
      in.state = &state;
      in.compat = Compat::Diffusers;
      in.strength = strength;
      in.images = device_init_images(r.init_images, d, 1);
      in.noise = goldens().to_f32("noise").slice0(d, d + 1);
      in.image_eps = goldens().to_f32("posterior_noise").slice0(d, d + 1);
      in.masked_eps = goldens().to_f32("masked_posterior_noise").slice0(d, d + 1);
      in.mask = &r.inpaint.mask_for(d);
      Tensor start;
      const InpaintDevice dev = start_inpaint_device(in, &start);
      Tensor input = Tensor::empty({1, 32, 32, 9});
      kernels::concat_channels_nhwc(start.data(), 4, dev.extra_channels.data(), 5, 32 * 32, input.data());
      for (int half : {0, 2})
        test::expect_parity(cat(name, " first UNet input, device ", d, " half ", half / 2), nchw(input),
                            want.slice0(half + d, half + d + 1));
    }
  }
}

// Flax: noise = normal(key_d) NCHW, the init image's ε = normal(key_d) NHWC, the masked image's
// ε = normal(split(key_d)[1]) NHWC. A run that draws them equals a run given them, computed here.
TEST(InpaintFlax, DrawsFromTheDeviceKeyAndItsSplit) {
  ShardedPipeline pipe(model9());
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75);
  req.compat = Compat::Flax;
  req.seed = 91;
  req.latents.reset();
  req.posterior_noise.reset();
  const GenerationResult drawn = pipe.run(req);
  EXPECT_EQ(drawn.model_calls, 6);  // Flax PNDM: calls 2 … 7 of 8

  const test::FlaxDraws expected = test::flax_device_draws(91, 2, 32, 32);
  test::expect_close_abs("flax inpaint noise = normal(key_d)", drawn.initial_latents, expected.noise, 0.0);
  req.latents = expected.noise;
  req.posterior_noise = expected.posterior_eps;
  req.masked_posterior_noise = expected.masked_eps;
  const GenerationResult given = pipe.run(req);
  test::expect_close_abs("flax inpaint drawn vs given final latents", drawn.final_latents, given.final_latents, 0.0);
}

// Flax at strength 1 is FlaxStableDiffusionInpaintPipeline: pure noise × init_noise_sigma, all N calls.
TEST(InpaintFlax, StrengthOneRunsEveryCallFromNoise) {
  ShardedPipeline pipe(model9());
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0);
  req.compat = Compat::Flax;
  req.masked_posterior_noise = golden5("masked_posterior_noise");
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.model_calls, 8);
  // The start does not depend on the init image's ε: another ε gives the same result.
  req.posterior_noise = golden5("masked_posterior_noise");
  test::expect_close_abs("flax strength 1 ignores the init image's ε", pipe.run(req).final_latents,
                         res.final_latents, 0.0);
}

TEST(InpaintBf16, NineChannelImagesWithinOneHundredthOfF32) {
  ShardedPipeline f32(model9()), bf16(model9(ComputeDType::BF16));
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masked_posterior_noise = golden5("masked_posterior_noise");
  const GenerationResult a = f32.run(req);
  req.dtype = ComputeDType::BF16;
  const GenerationResult b = bf16.run(req);
  test::expect_close_abs("inpaint bf16 vs f32 images (9-channel, PNDM)", b.images, a.images, 1e-2);
  EXPECT_GT(test::diff(b.images, a.images).max_abs, 0.0);
}

// White everywhere: the blend keeps nothing of the image, so a 4-channel run is image-to-image.
TEST(InpaintBehaviour, AllWhiteMaskOnFourChannelsIsImageToImage) {
  ShardedPipeline pipe(model4());
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75);
  Image8 white = req.masks[0];
  std::fill(white.rgb.begin(), white.rgb.end(), uint8_t{255});
  req.masks = {white};
  const GenerationResult inpainted = pipe.run(req);
  req.masks.clear();
  const GenerationResult img2img = pipe.run(req);
  test::expect_close_abs("all-white inpaint vs img2img", inpainted.final_latents, img2img.final_latents, 0.0);
}

// Black pixels far from the mask keep the init image: exactly with blur (pasted over) or
// only-masked (outside the box); the whole image changes nowhere else.
TEST(InpaintBehaviour, BlurAndOnlyMaskedPasteOverTheInitImage) {
  ShardedPipeline pipe(model4());
  for (bool only_masked : {false, true}) {
    GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75);
    req.latents.reset();
    req.posterior_noise.reset();
    req.mask_blur = 2;
    req.inpaint_only_masked = only_masked;
    req.only_masked_padding = 4;
    const ResolvedRequest r = pipe.resolve(req);
    const GenerationResult res = pipe.run(req);
    ASSERT_EQ(res.images.shape(), (Shape{2, 1, 64, 64, 3}));
    for (int d = 0; d < 2; ++d) {
      const PreparedMask& m = r.inpaint.mask_for(d);
      int kept = 0, changed = 0;
      for (int p = 0; p < 64 * 64; ++p) {
        const float* px = res.images.data() + (int64_t{d} * 64 * 64 + p) * 3;
        const bool inside_box = p % 64 >= m.box.x1 && p % 64 < m.box.x2 && p / 64 >= m.box.y1 && p / 64 < m.box.y2;
        if (m.paste_alpha.values[p] == 0 || !inside_box) {
          for (int c = 0; c < 3; ++c) ASSERT_EQ(px[c], init_images()[d].rgb[p * 3 + c] / 255.0f) << d << " " << p;
          ++kept;
        } else if (m.paste_alpha.values[p] == 255) {
          ++changed;
        }
      }
      EXPECT_GT(kept, 0);
      EXPECT_GT(changed, 0);
      if (only_masked) {
        EXPECT_LT(m.box.width(), 64) << "the crop should be smaller than the image";
      }
      std::printf("[inpaint %s] device %d: %d pixels kept, %d repainted, box (%d,%d)-(%d,%d)\n",
                  only_masked ? "only-masked" : "blur", d, kept, changed, m.box.x1, m.box.y1, m.box.x2, m.box.y2);
    }
  }
}

// Only masked = diffusers' padding_mask_crop (goldens/inpaint_crop.safetensors, one diffusers run
// per image since it crops a batch with one box): crop box, inpaint at the full size, paste back.
// diffusers returns 8-bit PIL images composited in 8-bit premultiplied alpha, Octodiff composites
// in float32: compared as 8-bit values.
TEST(InpaintOptions, OnlyMaskedMatchesDiffusersPaddingMaskCrop) {
  const auto crop_goldens = SafetensorsFile::open(inpaint_dir() / "goldens" / "inpaint_crop.safetensors");
  ShardedPipeline pipe(model4());
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75);
  req.inpaint_only_masked = true;
  req.only_masked_padding = 8;
  const ResolvedRequest r = pipe.resolve(req);
  for (int d = 0; d < 2; ++d) {
    const CropBox& b = r.inpaint.mask_for(d).box;
    EXPECT_EQ((std::vector<double>{double(b.x1), double(b.y1), double(b.x2), double(b.y2)}),
              crop_goldens->to_f64(crop_goldens->get(cat("pad8.crop.", d))));
  }
  const GenerationResult res = pipe.run(req);
  Tensor ours = res.images.reshaped({2, 64, 64, 3}).clone();
  for (int d = 0; d < 2; ++d) {
    const Image8 u8 = to_uint8(ours.data() + d * 64 * 64 * 3, 64, 64);
    for (int k = 0; k < 64 * 64 * 3; ++k) ours[d * 64 * 64 * 3 + k] = u8.rgb[k];
  }
  Tensor want = crop_goldens->to_f32("pad8.images");
  for (float& v : want) v = std::nearbyint(v * 255.0f);
  test::expect_close_abs("only-masked (padding 8) images vs diffusers, 8-bit levels", ours, want, 1.0);
}

TEST(InpaintOptions, CropRegionMatchesDiffusers) {
  const auto ms = masks();
  for (int k = 0; k < 2; ++k)
    for (int pad : {0, 5, 32})
      for (auto [W, H] : {std::pair{64, 64}, {64, 32}, {32, 64}}) {
        const std::string key = cat("crop.", k, ".", pad, ".", W, "x", H);
        const auto want = goldens().to_f64(goldens().get(key));
        const CropBox b = mask_crop_region(to_gray(ms[k]), W, H, pad);
        EXPECT_EQ((std::vector<double>{double(b.x1), double(b.y1), double(b.x2), double(b.y2)}), want) << key;
      }
}

TEST(InpaintOptions, BlurIsANormalisedSymmetricGaussian) {
  GrayImage dot{31, 31, std::vector<uint8_t>(31 * 31, 0)};
  dot.values[15 * 31 + 15] = 255;
  GrayImage bar = dot;
  for (int y = 0; y < 31; ++y) bar.values[y * 31 + 15] = 255;
  const GrayImage blurred = blur_mask(bar, 2);  // a vertical line: the horizontal profile of the kernel
  const uint8_t* row = &blurred.values[15 * 31];
  EXPECT_EQ(row[15 - 3], row[15 + 3]);
  EXPECT_GT(row[15], row[16]);
  EXPECT_GT(row[16], row[17]);
  EXPECT_EQ(row[15 - 6], 0);  // 2·int(2.5·2 + 0.5) + 1 = 11 taps: nothing beyond 5 pixels
  int sum = 0;
  for (int x = 0; x < 31; ++x) sum += row[x];
  EXPECT_NEAR(sum, 255, 3);
  EXPECT_EQ(blur_mask(dot, 0).values, dot.values);
}

TEST(InpaintBadInput, ClearErrors) {
  ShardedPipeline pipe(model9());
  auto expect_error = [&](const GenerationRequest& req, const std::string& fragment) {
    try {
      pipe.resolve(req);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const Error& e) {
      std::printf("[inpaint bad input] %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0);
  req.init_images.clear();
  req.latents.reset();
  req.posterior_noise.reset();
  expect_error(req, "a mask was given but no init image");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masks[1] = resize_lanczos(req.masks[1], 64, 48);
  expect_error(req, "mask 2 is 64×48 pixels but its init image is 64×64");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masks.push_back(req.masks[0]);
  expect_error(req, "3 masks for 2 devices");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.mask_blur = -1;
  expect_error(req, "mask blur must be 0 or more");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.only_masked_padding = -3;
  expect_error(req, "padding must be 0 or more");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  std::fill(req.masks[0].rgb.begin(), req.masks[0].rgb.end(), uint8_t{127});  // < 0.5 everywhere
  expect_error(req, "mask 1 is entirely black");
  req.masks[0] = golden_request(SchedulerKind::Pndm, 1.0).masks[1];
  std::fill(req.masks[0].rgb.begin(), req.masks[0].rgb.end(), uint8_t{0});
  req.inpaint_only_masked = true;
  expect_error(req, "mask 1 is entirely black");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masked_posterior_noise = Tensor::zeros({2, 1, 4, 16, 16});
  expect_error(req, "Unexpected masked-image posterior noise shape");
  req = golden_request(SchedulerKind::Pndm, 1.5);
  expect_error(req, "strength must be in (0, 1]");
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masks.clear();
  expect_error(req, "an inpainting model: give an init image and a mask");

  ShardedPipeline four(model4());
  req = golden_request(SchedulerKind::Pndm, 1.0);
  req.masked_posterior_noise = golden5("masked_posterior_noise");
  try {
    four.resolve(req);
    ADD_FAILURE() << "masked posterior noise accepted by a 4-channel run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 9-channel inpainting run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(inpaint_mode_for(7, 4), Error);
}

}  // namespace
