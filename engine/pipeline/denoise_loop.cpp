#include "pipeline/denoise_loop.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/device.h"
#include "kernels/gemm.h"
#include "kernels/tensor_ops.h"
#include "pipeline/latents.h"

namespace octodiff {
namespace {

// The UNet's batch for one call: x itself, or x twice ([uncond; cond] share the latents).
Tensor model_batch(const DenoiseSetup& setup, const Tensor& x) {
  if (setup.guidance != GuidanceKind::ClassifierFree) return x;
  const int64_t n = x.numel();
  Shape shape = x.shape();
  shape[0] *= 2;
  Tensor both = Tensor::empty(shape);
  std::memcpy(both.data(), x.data(), sizeof(float) * n);
  std::memcpy(both.data() + n, x.data(), sizeof(float) * n);
  return both;
}

// torch's unbiased x.std() over one image's n values (accumulated in double, rounded to f32).
float image_std(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += x[k];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t k = 0; k < n; ++k) squares += (x[k] - mean) * (x[k] - mean);
  return static_cast<float>(std::sqrt(squares / static_cast<double>(n - 1)));
}

// diffusers' rescale_noise_cfg, image by image of guided (B, h, w, C), in its f32 steps:
// noise = φ·(noise·(std(text)/std(noise))) + (1 − φ)·noise.
void rescale_guided_noise(Tensor& guided, const float* text, double phi) {
  const int64_t images = guided.dim(0), n = guided.numel() / images;
  const float keep = static_cast<float>(1.0 - phi), mix = static_cast<float>(phi);
  for (int64_t b = 0; b < images; ++b) {
    float* x = guided.data() + b * n;
    const float ratio = image_std(text + b * n, n) / image_std(x, n);
    for (int64_t k = 0; k < n; ++k) x[k] = mix * (x[k] * ratio) + keep * x[k];
  }
}

// noise = uncond + g · (text − uncond), in float32 as both pipelines compute it; then the
// guidance rescale when asked for.
Tensor apply_guidance(const DenoiseSetup& setup, const Tensor& eps) {
  if (setup.guidance != GuidanceKind::ClassifierFree) return eps;
  Shape shape = eps.shape();
  shape[0] /= 2;
  Tensor guided = Tensor::empty(shape);
  const int64_t n = guided.numel();
  const float* u = eps.data();
  const float* c = eps.data() + n;
  const float g = static_cast<float>(setup.guidance_scale);
  for (int64_t k = 0; k < n; ++k) guided[k] = u[k] + g * (c[k] - u[k]);
  if (setup.guidance_rescale > 0) rescale_guided_noise(guided, c, setup.guidance_rescale);
  return guided;
}

// input (N, h, w, C) ‖ extra (N or N/2, h, w, E) along the channels; extra repeats for a CFG batch.
Tensor with_extra_channels(const Tensor& input, const Tensor* extra) {
  if (!extra) return input;
  const int64_t N = input.dim(0), n = extra->dim(0), C = input.dim(3), E = extra->dim(3);
  const int64_t P = n * input.dim(1) * input.dim(2);
  Tensor out = Tensor::empty({N, input.dim(1), input.dim(2), C + E});
  for (int64_t k = 0; k < N / n; ++k)
    kernels::concat_channels_nhwc(input.data() + k * P * C, C, extra->data(), E, P, out.data() + k * P * (C + E));
  return out;
}

// The noise prediction of call i for latents x (timestep_cond: the embedded guidance, or null).
Tensor predict_noise(const DenoiseSetup& setup, const SchedulerState& state, const Tensor& x, const Tensor& context,
                     const Tensor* timestep_cond, int i, const DenoiseHooks& hooks) {
  const Tensor* extra = hooks.extra_input_channels;
  const Scheduler& scheduler = *setup.scheduler;
  const double t = scheduler.model_timestep(state, i);
  const Tensor input = scheduler.scale_model_input(state, model_batch(setup, x), i);
  // bf16 weights: the first call of a guided run takes its activations split in two bf16 halves
  // (~16 bits, kernels/gemm.h), at about twice a bf16 call's time. The first step jumps from the
  // largest noise level and guidance multiplies the call's error by its scale (7.5 × (c − u)), so
  // the schedulers carry this call's error furthest: on the tiny goldens' 5-step pipeline, float32
  // activations for this call alone took the max image error against f32 from 1.07–1.28e-2 to
  // 5.3–7.7e-3 for every scheduler, and for all the later calls only to 0.95–1.36e-2 (bf16_test.cpp
  // prints today's figures). One-pass runs (guidance ≤ 1, LCM's embedded guidance) have no
  // multiplier: on the tiny models rounded activations gave the same error as split ones
  // (one-step Euler ancestral/DDIM trailing 5.4–7.9e-3 vs 5.3–8.1e-3, LCM 1–4 steps 5.5–6.8e-3
  // vs 5.3–6.4e-3, seeds 3 and 4), so a one-step image's only call runs at bf16 speed.
  // "First" is the run's first call: image-to-image and inpainting start at first_call > 0 (on the
  // img2img goldens this took bf16-vs-f32 image errors from 1.07–1.73e-2 to 0.67–1.24e-2).
  const bool split = i == setup.first_call && setup.guidance == GuidanceKind::ClassifierFree;
  const kernels::ScopedBf16Activations activations(split ? kernels::Bf16Activations::Split
                                                          : kernels::Bf16Activations::Rounded);
  // Every guided call of a bf16 run also takes its two halves as guided pairs (models/layers.h):
  // the conditioned half as the unconditional half's rounding plus the rounded difference, so the
  // guidance scale no longer multiplies two independent roundings. At a rounded call's products
  // this took the tiny goldens' bf16-vs-f32 image errors from 6.1–9.0e-3 to 5.4–6.3e-3 (text to
  // image, five schedulers), img2img at strength 0.5 from 1.24e-2 / 1.10e-2 to 9.0e-3 / 7.7e-3
  // (PNDM / Euler), inpainting from 9.0e-3 to 6.5e-3; the first call's split still helps on top
  // (img2img 0.5 without it: 1.02e-2 / 8.9e-3).
  const ScopedGuidedPairs pairs(setup.guidance == GuidanceKind::ClassifierFree ? input.dim(0) : 0);
  // ControlNets see the latents as the UNet's own input has them (without inpainting's channels).
  const std::optional<UNetResiduals> residuals =
      setup.residuals ? setup.residuals(i, t, input, context) : std::nullopt;
  const Tensor eps =
      setup.unet->forward_nhwc(with_extra_channels(input, extra), std::vector<double>(input.dim(0), t), context,
                               timestep_cond, setup.numerics, nullptr, residuals ? &*residuals : nullptr,
                               hooks.text_time);
  return apply_guidance(setup, eps);
}

}  // namespace

Tensor step_noise(const StepNoise& noise, int i, const Tensor& x) {
  const Shape nchw{x.dim(0), x.dim(3), x.dim(1), x.dim(2)};
  Tensor drawn = Tensor::empty(nchw);
  if (noise.injected)
    std::memcpy(drawn.data(), noise.injected + (i - noise.injected_first_call) * drawn.numel(),
                sizeof(float) * drawn.numel());
  else
    jax::normal_into(jax::fold_in(noise.key, static_cast<uint32_t>(i)), drawn.numel(), noise.rng, drawn.data());
  return to_sampling_layout(drawn, 1.0f);
}

Tensor denoise(const DenoiseSetup& setup, Tensor x, const Tensor& context, const StepNoise& noise,
               const StepObserver& observer, const DenoiseHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  SchedulerState state = *setup.initial_state;
  std::optional<Tensor> guidance_embedding;  // (B, time_cond_proj_dim): the same for every step
  if (setup.guidance == GuidanceKind::Embedded)
    guidance_embedding = lcm_guidance_embedding(std::vector<double>(x.dim(0), setup.guidance_scale),
                                                setup.unet->config().time_cond_proj_dim);
  const Tensor* timestep_cond = guidance_embedding ? &*guidance_embedding : nullptr;
  for (int i = setup.first_call; i < setup.calls; ++i) {
    check_cancelled();
    const auto t0 = Clock::now();
    const Tensor eps = predict_noise(setup, state, x, context, timestep_cond, i, hooks);
    const Scheduler& scheduler = *setup.scheduler;
    StepResult next = scheduler.needs_noise(state, i) ? scheduler.step(state, eps, i, x, step_noise(noise, i, x))
                                                       : scheduler.step(state, eps, i, x);
    x = std::move(next.prev_sample);
    state = std::move(next.state);
    if (hooks.after_step) hooks.after_step(i, x);
    if (observer) observer(i, std::chrono::duration<double>(Clock::now() - t0).count(), x);
  }
  return x;
}

}  // namespace octodiff
