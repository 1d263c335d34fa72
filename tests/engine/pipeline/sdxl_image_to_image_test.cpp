// SDXL image-to-image on the tiny random SDXL (tests/data/tiny-sdxl).
//  - Parity: diffusers' StableDiffusionXLImg2ImgPipeline (goldens/img2img.safetensors, made by
//    tools/goldens/make_sdxl_img2img_goldens.py) under --compat diffusers with its posterior noise
//    and noise injected: Euler at strength 0.5 and 0.75, DDIM at 0.75, one init image per device
//    and one for every device, diffusers' size conditioning; 8 steps, guidance 5, 2 devices × 1
//    (and 1 device × 2). f32 latents and images at the parity bar (1e-4 of scale), errors printed.
//  - Flax semantics (no Flax SDXL img2img exists): the SD 1.x Flax img2img rules with SDXL's
//    conditioning — the same key for the noise and the posterior ε, sides floored to 32; on these
//    32 × 64 images the Flax-mode run must land on diffusers' golden (Euler: no init_noise_sigma
//    factor, only the schedulers' float32 sigmas and the `flax` numerics differ).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "kernels/tensor_ops.h"
#include "pipeline/image_to_image.h"
#include "pipeline/sdxl_prompt_encoding.h"
#include "pipeline/sharded_pipeline.h"
#include "golden_requests.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 8, kH = 64, kW = 32, kh = 32, kw = 16;  // the goldens' image and latent sizes

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
fs::path golden_path(const std::string& name) { return sdxl_dir() / "goldens" / name; }

std::shared_ptr<const StableDiffusionModel> sdxl_with_encoder(ComputeDType dtype = ComputeDType::F32) {
  auto load = [](ComputeDType t) {
    ModelLoadOptions o;
    o.load_vae_encoder = true;
    o.dtype = t;
    return StableDiffusionModel::load(sdxl_dir(), o);
  };
  static auto f32 = load(ComputeDType::F32);
  static std::shared_ptr<const StableDiffusionModel> bf16;
  if (dtype == ComputeDType::F32) return f32;
  if (!bf16) bf16 = load(ComputeDType::BF16);
  return bf16;
}

const SafetensorsFile& goldens() {
  static auto f = SafetensorsFile::open(golden_path("img2img.safetensors"));
  return *f;
}
std::vector<Image8> init_images() { return test::golden_init_images(sdxl_dir()); }
Tensor golden5(const std::string& name) { return goldens().to_f32(name).reshaped({2, 1, 4, kh, kw}); }

struct Case {
  const char* golden;
  SchedulerKind kind;
  double strength;
  bool one_image = false;  // init image 0 for every device
  bool micro = false;      // diffusers' original size / crop / target size
};

// The goldens' request: 2 devices × 1 image, the SDXL pipeline goldens' prompts and negative prompt.
GenerationRequest golden_request(const Case& c) {
  const nlohmann::json s = test::golden_settings(sdxl_dir());
  GenerationRequest req = test::golden_prompts_request(s);
  req.steps = kSteps;
  req.guidance_scale = s["guidance"].get<double>();
  req.scheduler = c.kind;
  req.init_images = init_images();
  if (c.one_image) req.init_images.resize(1);
  req.strength = c.strength;
  req.latents = golden5("noise");
  req.posterior_noise = golden5("posterior_noise");
  if (c.micro) {  // the script's MICRO, (height, width) pairs
    req.sdxl_size.original_height = 96;
    req.sdxl_size.original_width = 80;
    req.sdxl_size.crop_top = 4;
    req.sdxl_size.crop_left = 8;
    req.sdxl_size.target_height = 48;
    req.sdxl_size.target_width = 40;
  }
  return req;
}

void expect_matches(const GenerationResult& res, const std::string& name, const std::string& label) {
  const auto timesteps = goldens().to_f64(goldens().get(name + ".timesteps"));
  EXPECT_EQ(res.model_calls, static_cast<int>(timesteps.size())) << name;
  test::expect_parity(label + " final latents", res.final_latents.reshaped({2, 4, kh, kw}),
                      goldens().to_f32(name + ".latents_final"));
  test::expect_parity(label + " images", res.images.reshaped({2, kH, kW, 3}), goldens().to_f32(name + ".images"));
}

std::string case_name(const Case& c) { return test::param_name(c.golden); }

class SdxlImageToImageParity : public ::testing::TestWithParam<Case> {};

TEST_P(SdxlImageToImageParity, MatchesDiffusers) {
  const Case c = GetParam();
  ShardedPipeline pipe(sdxl_with_encoder());
  const GenerationRequest req = golden_request(c);
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.signature.strength, c.strength);
  EXPECT_EQ(res.signature.height, kH);
  EXPECT_EQ(res.signature.width, kW);
  // The time ids the pipeline conditions on (the init image's size unless given) are diffusers'.
  const std::array<float, 6> ids = sdxl_time_ids(req.sdxl_size, res.signature.height, res.signature.width);
  const Tensor want_ids = goldens().to_f32(std::string(c.golden) + ".time_ids");  // (4, 6): [negative; positive]
  for (int64_t k = 0; k < want_ids.numel(); ++k) EXPECT_EQ(ids[k % 6], want_ids[k]) << c.golden << " time id " << k;
  expect_matches(res, c.golden, std::string("sdxl img2img ") + c.golden);
}

INSTANTIATE_TEST_SUITE_P(EulerAndDdim, SdxlImageToImageParity,
                         ::testing::Values(Case{"euler_s0.5", SchedulerKind::Euler, 0.5},
                                           Case{"euler_s0.75", SchedulerKind::Euler, 0.75},
                                           Case{"euler_s0.75_one", SchedulerKind::Euler, 0.75, true},
                                           Case{"euler_s0.75_micro", SchedulerKind::Euler, 0.75, false, true},
                                           Case{"ddim_s0.75", SchedulerKind::Ddim, 0.75}),
                         [](const auto& info) { return case_name(info.param); });

// One device with a batch of two from one init image: the same images as two devices.
TEST(SdxlImageToImage, OneDeviceBatchTwoMatchesToo) {
  ShardedPipeline pipe(sdxl_with_encoder());
  GenerationRequest req = golden_request({"euler_s0.75_one", SchedulerKind::Euler, 0.75, true});
  req.devices = 1;
  req.batch_per_device = 2;
  req.latents = goldens().to_f32("noise").reshaped({1, 2, 4, kh, kw});
  req.posterior_noise = goldens().to_f32("posterior_noise").reshaped({1, 2, 4, kh, kw});
  expect_matches(pipe.run(req), "euler_s0.75_one", "sdxl img2img 1 device x 2");
}

// The stages alone: image → posterior sample × SDXL's scaling factor (0.13025) → add_noise.
TEST(SdxlImageToImageStages, StartLatentsMatchDiffusers) {
  auto model = sdxl_with_encoder();
  EXPECT_DOUBLE_EQ(model->vae().config().scaling_factor, 0.13025);
  const auto images = init_images();
  for (const Case c : {Case{"euler_s0.5", SchedulerKind::Euler, 0.5}, Case{"ddim_s0.75", SchedulerKind::Ddim, 0.75}}) {
    auto scheduler =
        Scheduler::create(c.kind, model->scheduler_config(c.kind, std::nullopt), SchedulerSemantics::Diffusers);
    const SchedulerState state = scheduler->set_timesteps_for_strength(kSteps, c.strength);
    const Tensor eps = goldens().to_f32("posterior_noise"), noise = goldens().to_f32("noise");
    Tensor start = Tensor::empty({2, 4, kh, kw});
    for (int d = 0; d < 2; ++d) {
      const Tensor latents = sample_image_latents(model->vae(), device_init_images(images, d, 1), eps.slice0(d, d + 1));
      const Tensor x = noised_start_latents(*scheduler, state, latents, noise.slice0(d, d + 1), Compat::Diffusers);
      kernels::nhwc_to_nchw(x.data(), 1, kh, kw, 4, start.data() + d * 4 * kh * kw);
    }
    test::expect_parity(std::string("sdxl img2img ") + c.golden + " start latents", start,
                        goldens().to_f32(std::string(c.golden) + ".latents_start"));
  }
}

// Flax mode on images whose sides are multiples of 32 (the Flax preprocessing keeps them): SDXL's
// conditioning with the negative prompt encoded, Euler's start without init_noise_sigma. Only the
// Flax scheduler's float32 sigmas and the `flax` numerics differ from diffusers.
TEST(SdxlImageToImageFlax, MatchesDiffusersUpToTheSchedulersSigmas) {
  ShardedPipeline pipe(sdxl_with_encoder());
  GenerationRequest req = golden_request({"euler_s0.75", SchedulerKind::Euler, 0.75});
  req.compat = Compat::Flax;
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.signature.compat, Compat::Flax);
  expect_matches(res, "euler_s0.75", "sdxl flax-mode img2img vs diffusers euler_s0.75");
}

// Flax: noise = normal(key_d, (B, C, h, w)) and ε = normal(key_d, (B, h, w, C)) — one key, as the
// SD 1.x Flax img2img pipeline. A run that draws them equals a run given them, computed here.
TEST(SdxlImageToImageFlax, NoiseAndPosteriorShareTheDeviceKey) {
  ShardedPipeline pipe(sdxl_with_encoder());
  GenerationRequest req = golden_request({"euler_s0.75", SchedulerKind::Euler, 0.75});
  req.compat = Compat::Flax;
  req.scheduler.reset();  // the folder's Euler
  req.seed = 23;
  req.latents.reset();
  req.posterior_noise.reset();
  const GenerationResult drawn = pipe.run(req);
  EXPECT_EQ(drawn.model_calls, 6);  // calls 2 … 7 of 8

  const test::FlaxDraws expected = test::flax_device_draws(23, 2, kh, kw);
  test::expect_close_abs("sdxl flax img2img noise = normal(key_d)", drawn.initial_latents, expected.noise, 0.0);
  req.latents = expected.noise;
  req.posterior_noise = expected.posterior_eps;
  test::expect_close_abs("sdxl flax img2img drawn vs given final latents", pipe.run(req).final_latents,
                         drawn.final_latents, 0.0);
}

// Flax floors sides to 32 (diffusers to the VAE scale): a 40 × 70 image runs at 32 × 64 and equals
// the run given that image resized (Lanczos) by the caller; the size options stay diffusers'.
TEST(SdxlImageToImageFlax, ImageIsFlooredToThirtyTwo) {
  ShardedPipeline pipe(sdxl_with_encoder());
  GenerationRequest req = golden_request({"euler_s0.5", SchedulerKind::Euler, 0.5});
  req.compat = Compat::Flax;
  req.init_images = {resize_lanczos(init_images()[0], 40, 70)};
  const GenerationResult floored = pipe.run(req);
  EXPECT_EQ(floored.images.shape(), (Shape{2, 1, kH, kW, 3}));
  req.init_images = {resize_lanczos(req.init_images[0], kW, kH)};
  test::expect_close_abs("sdxl flax img2img 40x70 vs resized 32x64", pipe.run(req).images, floored.images, 0.0);
  req.sdxl_size.original_height = 128;
  EXPECT_THROW(pipe.resolve(req), Error);  // diffusers' option (--compat diffusers)
}

// bf16 (weights and activations, VAE encoder included) against f32 on the goldens' request.
TEST(SdxlImageToImage, Bf16ImagesCloseToF32) {
  ShardedPipeline f32(sdxl_with_encoder()), bf16(sdxl_with_encoder(ComputeDType::BF16));
  GenerationRequest req = golden_request({"euler_s0.75", SchedulerKind::Euler, 0.75});
  const GenerationResult a = f32.run(req);
  req.dtype = ComputeDType::BF16;
  const GenerationResult b = bf16.run(req);
  test::expect_close_abs("sdxl img2img bf16 vs f32 images (Euler, strength 0.75)", b.images, a.images, 1e-2);
  EXPECT_GT(test::diff(b.images, a.images).max_abs, 0.0);
}

TEST(SdxlImageToImageBadInput, ClearErrors) {
  ShardedPipeline pipe(sdxl_with_encoder());
  auto expect_error = [&](const GenerationRequest& req, const std::string& fragment) {
    try {
      pipe.resolve(req);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  GenerationRequest req = golden_request({"euler_s0.5", SchedulerKind::Euler, 0.5});
  req.strength = 1.5;
  expect_error(req, "strength must be in (0, 1]");
  req = golden_request({"euler_s0.5", SchedulerKind::Euler, 0.5});
  req.init_images = {resize_lanczos(init_images()[0], 32, 60)};  // diffusers: 60 is a multiple of 2, not of 8
  expect_error(req, "height 60 is not a multiple of 8");
  req = golden_request({"euler_s0.5", SchedulerKind::Euler, 0.5});
  req.posterior_noise = Tensor::zeros({2, 1, 4, 16, 16});
  expect_error(req, "Unexpected posterior noise shape");
  ShardedPipeline without_encoder(StableDiffusionModel::load(sdxl_dir()));
  try {
    without_encoder.resolve(golden_request({"euler_s0.5", SchedulerKind::Euler, 0.5}));
    ADD_FAILURE() << "an SDXL model without its VAE encoder ran image-to-image";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_vae_encoder"), std::string::npos) << e.what();
  }
}

}  // namespace
