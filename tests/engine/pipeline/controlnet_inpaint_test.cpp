// Inpainting and ControlNet together, as diffusers' StableDiffusionControlNetInpaintPipeline
// (tests/data/tiny-controlnet-inpaint, made by tools/goldens/make_controlnet_inpaint_goldens.py),
// under --compat diffusers with every random draw injected, 6 steps, guidance 7.5, 2 devices × 1:
//  - the 9-channel inpainting UNet with a ControlNet that reads the 4 latent channels (PNDM
//    strength 1; Euler strength 0.75 with a guidance window);
//  - tiny-sd's 4-channel UNet (legacy blend) with controlnet_a, and with two ControlNets at once;
//  - only-masked: the control images cropped with the init images and masks.
// Final latents and images at ≤ 1e-4 of their scale (f32); the error is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/controlnet.h"
#include "pipeline/sharded_pipeline.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path data(const std::string& rel) { return test::data_dir() / rel; }

std::shared_ptr<const StableDiffusionModel> load_model(const fs::path& dir) {
  ModelLoadOptions o;
  o.load_vae_encoder = true;
  return StableDiffusionModel::load(dir, o);
}
std::shared_ptr<const StableDiffusionModel> model9() {
  static auto m = load_model(data("tiny-sd-inpaint"));
  return m;
}
std::shared_ptr<const StableDiffusionModel> model4() {
  static auto m = load_model(test::tiny_sd_dir());
  return m;
}

const SafetensorsFile& goldens() {
  static auto f = SafetensorsFile::open(data("tiny-controlnet-inpaint") / "goldens.safetensors");
  return *f;
}
Tensor golden5(const std::string& name) { return goldens().to_f32(name).reshaped({2, 1, 4, 32, 32}); }
Image8 control_png(int k) { return read_png(data("tiny-controlnet") / cat("control_", k, ".png")); }

ControlNetUse controlnet(const fs::path& dir, double scale, std::vector<Image8> images) {
  ControlNetUse use;
  use.model = load_controlnet(dir, ComputeDType::F32);
  use.name = dir.filename().string();
  use.scale = scale;
  use.images = std::move(images);
  return use;
}

// The goldens' request: tiny-sd's pipeline prompts, init images, masks and injected noise.
GenerationRequest golden_request(SchedulerKind kind, double strength, bool nine) {
  GenerationRequest req = test::golden_prompts_request(test::golden_settings(test::tiny_sd_dir()));
  req.steps = 6;
  req.guidance_scale = 7.5;
  req.scheduler = kind;
  req.init_images = test::golden_init_images(test::tiny_sd_dir());
  for (int k = 0; k < 2; ++k) req.masks.push_back(read_png(data("tiny-sd-inpaint") / "goldens" / cat("mask_", k, ".png")));
  req.strength = strength;
  req.latents = golden5("noise");
  req.posterior_noise = golden5("posterior_noise");
  if (nine) req.masked_posterior_noise = golden5("masked_posterior_noise");
  return req;
}

GenerationResult run_and_check_calls(const std::string& name, bool nine, const GenerationRequest& req) {
  ShardedPipeline pipe(nine ? model9() : model4());
  const GenerationResult res = pipe.run(req);
  EXPECT_TRUE(res.signature.inpaint) << name;
  const auto timesteps = goldens().to_f64(goldens().get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;
  return res;
}

void expect_matches_goldens(const std::string& name, const GenerationResult& res) {
  test::expect_parity("controlnet inpaint " + name + " final latents", res.final_latents.reshaped({2, 4, 32, 32}),
                      goldens().to_f32(name + ".latents_final"));
  test::expect_parity("controlnet inpaint " + name + " images", res.images.reshaped({2, 64, 64, 3}),
                      goldens().to_f32(name + ".images"));
}

}  // namespace

TEST(ControlNetInpaint, NineChannelUNetWithAControlNetMatchesDiffusers) {
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0, true);
  req.controlnets = {controlnet(data("tiny-controlnet-inpaint") / "controlnet_9", 0.8, {control_png(0), control_png(1)})};
  expect_matches_goldens("ch9_pndm_s1", run_and_check_calls("ch9_pndm_s1", true, req));
}

TEST(ControlNetInpaint, NineChannelEulerStrengthAndGuidanceWindowMatchDiffusers) {
  GenerationRequest req = golden_request(SchedulerKind::Euler, 0.75, true);
  ControlNetUse use = controlnet(data("tiny-controlnet-inpaint") / "controlnet_9", 0.8, {control_png(0), control_png(1)});
  use.guidance_start = 0.2;
  use.guidance_end = 0.8;
  req.controlnets = {use};
  // diffusers' controlnet_keep over the calls run: the window must leave some calls out.
  const auto keep = goldens().to_f64(goldens().get("ch9_euler_s0.75.keep"));
  ASSERT_TRUE(std::count(keep.begin(), keep.end(), 0.0) > 0);
  for (size_t i = 0; i < keep.size(); ++i)
    EXPECT_EQ(controlnet_keep(static_cast<int>(i), static_cast<int>(keep.size()), 0.2, 0.8), keep[i]) << i;
  expect_matches_goldens("ch9_euler_s0.75", run_and_check_calls("ch9_euler_s0.75", true, req));
}

TEST(ControlNetInpaint, FourChannelLegacyBlendWithAControlNetMatchesDiffusers) {
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0, false);
  req.controlnets = {controlnet(data("tiny-controlnet") / "controlnet_a", 0.8, {control_png(0), control_png(1)})};
  expect_matches_goldens("ch4_pndm_s1", run_and_check_calls("ch4_pndm_s1", false, req));
}

TEST(ControlNetInpaint, FourChannelWithTwoControlNetsMatchesDiffusers) {
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75, false);
  ControlNetUse a = controlnet(data("tiny-controlnet") / "controlnet_a", 1.0, {control_png(2)});
  ControlNetUse b = controlnet(data("tiny-controlnet") / "controlnet_b", 0.6, {control_png(0)});
  a.guidance_end = 0.9;
  b.guidance_start = 0.2;
  b.guidance_end = 0.7;
  req.controlnets = {a, b};
  expect_matches_goldens("ch4_multi_s0.75", run_and_check_calls("ch4_multi_s0.75", false, req));
}

// diffusers returns 8-bit PIL images pasted back in 8-bit premultiplied alpha, Octodiff pastes in
// float32: compared as 8-bit levels, as the only-masked inpainting test does.
TEST(ControlNetInpaint, OnlyMaskedCropsTheControlImagesToo) {
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 0.75, false);
  req.inpaint_only_masked = true;
  req.only_masked_padding = 8;
  req.controlnets = {controlnet(data("tiny-controlnet") / "controlnet_a", 0.8, {control_png(0), control_png(1)})};
  ShardedPipeline pipe(model4());
  const GenerationResult res = pipe.run(req);
  Tensor ours = res.images.reshaped({2, 64, 64, 3}).clone();
  for (int d = 0; d < 2; ++d) {
    const Image8 u8 = to_uint8(ours.data() + d * 64 * 64 * 3, 64, 64);
    for (int k = 0; k < 64 * 64 * 3; ++k) ours[d * 64 * 64 * 3 + k] = u8.rgb[k];
  }
  Tensor want = goldens().to_f32("ch4_crop8.images");
  for (float& v : want) v = std::nearbyint(v * 255.0f);
  test::expect_close_abs("controlnet inpaint only-masked (padding 8) images, 8-bit levels", ours, want, 1.0);
  // Without the crop of the control images the result differs: the test sees the crop.
  req.controlnets[0].images = {control_png(0), control_png(1)};
  ShardedPipeline plain(model4());
  const ResolvedRequest r = plain.resolve(req);
  EXPECT_NE(r.request.controlnets[0].images[0].rgb, control_png(0).rgb) << "the control image should be cropped";
}

// A ControlNet is checked against the latents it reads: one for 4 latent channels runs beside a
// 9-channel UNet, one for another UNet layout is refused with the reason.
TEST(ControlNetInpaint, ControlNetForAnotherLayoutIsRefused) {
  GenerationRequest req = golden_request(SchedulerKind::Pndm, 1.0, true);
  // tiny-controlnet's ControlNets follow tiny-sd's UNet (2 resnets per level), the 9-channel UNet has 1.
  req.controlnets = {controlnet(data("tiny-controlnet") / "controlnet_a", 0.8, {control_png(0)})};
  ShardedPipeline pipe(model9());
  try {
    pipe.resolve(req);
    ADD_FAILURE() << "a ControlNet for another UNet layout was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers_per_block"), std::string::npos) << e.what();
  }
}
