// Requests that reproduce a tiny model's diffusers goldens: the prompts of its goldens/prompts.json
// (written by the script that made the model: tools/goldens/make_tiny_sd*.py, make_tiny_sdxl.py)
// and the image-to-image init images beside them (make_img2img_goldens.py,
// make_sdxl_img2img_goldens.py).
// Header-only: the pipeline tests that use it link the pipeline; the support library does not.
#pragma once

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/generation.h"
#include "pipeline/model.h"
#include "random/jax_prng.h"
#include "test_support.h"

namespace octodiff::test {

// model_dir/goldens/prompts.json.
inline nlohmann::json golden_settings(const std::filesystem::path& model_dir) {
  return nlohmann::json::parse(read_text_file(model_dir / "goldens" / "prompts.json"));
}

// A request with the goldens' "pipeline_prompts" (one per device) and "pipeline_negative_prompt",
// under --compat diffusers (the goldens are diffusers' runs); everything else at its default.
inline GenerationRequest golden_prompts_request(const nlohmann::json& settings) {
  GenerationRequest req;
  for (const auto& p : settings["pipeline_prompts"]) req.prompts.push_back(p.get<std::string>());
  req.negative_prompts = {settings["pipeline_negative_prompt"].get<std::string>()};
  req.compat = Compat::Diffusers;
  return req;
}

// tiny-sd (tiny_sd_dir()), loaded once per test program.
inline std::shared_ptr<const StableDiffusionModel> shared_tiny_sd() {
  static auto model = StableDiffusionModel::load(tiny_sd_dir());
  return model;
}

// tiny-sd's pipeline goldens' run (goldens/pipeline.safetensors): its prompts and negative prompt,
// 5 steps, guidance 7.5, its initial latents (2 devices × 1), --compat diffusers, `kind`.
inline GenerationRequest tiny_sd_pipeline_request(SchedulerKind kind) {
  const std::filesystem::path dir = tiny_sd_dir();
  GenerationRequest req = golden_prompts_request(golden_settings(dir));
  req.steps = 5;
  req.guidance_scale = 7.5;
  req.scheduler = kind;
  req.latents = SafetensorsFile::open(dir / "goldens" / "pipeline.safetensors")
                    ->to_f32("latents_init")
                    .reshaped({2, 1, 4, 32, 32});
  return req;
}

// A run of tiny_sd_pipeline_request against diffusers' `<run>.latents_final` (at the parity bar)
// and `<run>.images` (1e-3) in `goldens`; `label` names them in the printed errors.
inline void expect_tiny_sd_pipeline_golden(const std::string& label, const GenerationResult& res,
                                           const SafetensorsFile& goldens, const std::string& run) {
  expect_parity(label + " " + run + " final latents", res.final_latents.reshaped({2, 4, 32, 32}),
                goldens.to_f32(run + ".latents_final"));
  expect_close_abs(label + " " + run + " images", res.images.reshaped({2, 64, 64, 3}),
                   goldens.to_f32(run + ".images"), 1e-3);
}

// model_dir/goldens/img2img_init_0.png and img2img_init_1.png: one init image per device.
inline std::vector<Image8> golden_init_images(const std::filesystem::path& model_dir) {
  const std::filesystem::path dir = model_dir / "goldens";
  return {read_png(dir / "img2img_init_0.png"), read_png(dir / "img2img_init_1.png")};
}

// diffusers' per-step draws [steps, D, C, h, w] (each step's tensor holds every device's row) as a
// request's step_noise (D, calls, B = 1, C, h, w): the first `rows` calls of each device get theirs,
// later calls stay zero (calls that add no noise).
inline Tensor step_noise_per_device(const Tensor& golden, int64_t calls, int64_t rows) {
  const int64_t devices = golden.dim(1), n = golden.numel() / (golden.dim(0) * devices);
  Tensor noise = Tensor::zeros({devices, calls, 1, golden.dim(2), golden.dim(3), golden.dim(4)});
  for (int64_t d = 0; d < devices; ++d)
    for (int64_t k = 0; k < rows; ++k)
      std::memcpy(noise.data() + (d * calls + k) * n, golden.data() + (k * devices + d) * n,
                  sizeof(float) * n);
  return noise;
}

// The step noise a run draws without injected noise (schedulers/scheduler.h's rule): call i of
// device d takes normal(fold_in(key_d, i)), as (D, calls, B = 1, C, h, w).
inline Tensor step_noise_by_rule(const std::vector<jax::Key>& device_keys, int64_t calls, int64_t c,
                                 int64_t h, int64_t w, jax::RngScheme rng) {
  const int64_t devices = static_cast<int64_t>(device_keys.size()), n = c * h * w;
  Tensor noise = Tensor::zeros({devices, calls, 1, c, h, w});
  for (int64_t d = 0; d < devices; ++d)
    for (int64_t i = 0; i < calls; ++i)
      jax::normal_into(jax::fold_in(device_keys[d], static_cast<uint32_t>(i)), n, rng,
                       noise.data() + (d * calls + i) * n);
  return noise;
}

// What a Flax-semantics image-to-image or inpaint run draws from `seed` with one image on each of
// `devices` devices and 4 × h × w latents, as (devices, 1, 4, h, w) NCHW tensors (key_d = device d's
// key of split(prng_key(seed), devices)): the initial noise normal(key_d) read NCHW, the init image's
// posterior ε normal(key_d) read NHWC, the masked image's ε normal(split(key_d)[1]) read NHWC.
struct FlaxDraws {
  Tensor noise, posterior_eps, masked_eps;
};

inline FlaxDraws flax_device_draws(int64_t seed, int devices, int64_t h, int64_t w) {
  const auto keys = jax::split(jax::prng_key(seed), devices, jax::RngScheme::Classic);
  const int64_t plane = h * w, n = 4 * plane;
  FlaxDraws out{Tensor::empty({devices, 1, 4, h, w}), Tensor::empty({devices, 1, 4, h, w}),
                Tensor::empty({devices, 1, 4, h, w})};
  auto draw_nhwc = [&](const jax::Key& key, Tensor& into, int d) {
    std::vector<float> flat(n);
    jax::normal_into(key, n, jax::RngScheme::Classic, flat.data());
    for (int c = 0; c < 4; ++c)
      for (int64_t p = 0; p < plane; ++p) into[d * n + c * plane + p] = flat[p * 4 + c];  // NHWC → NCHW
  };
  for (int d = 0; d < devices; ++d) {
    jax::normal_into(keys[d], n, jax::RngScheme::Classic, out.noise.data() + d * n);
    draw_nhwc(keys[d], out.posterior_eps, d);
    draw_nhwc(jax::split(keys[d], 2, jax::RngScheme::Classic)[1], out.masked_eps, d);
  }
  return out;
}

}  // namespace octodiff::test
