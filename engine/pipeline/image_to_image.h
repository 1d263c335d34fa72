// Image-to-image: FlaxStableDiffusionImg2ImgPipeline (spec/pipeline.md §12), and diffusers'
// StableDiffusionImg2ImgPipeline under Compat::Diffusers. Only the start of sampling differs
// from text-to-image; the prompts, the denoising loop and the decoder are the shared stages:
//
//   init image ─ floor to a multiple (32 Flax, 8 diffusers), Lanczos ─ 2x − 1 ─ VAE encoder
//   → mean + std·ε (posterior sample) × scaling_factor = image latents
//   → scheduler.add_noise(image latents, noise, call t_start) (× init_noise_sigma under Flax)
//   → denoise calls t_start … N − 1 (Scheduler::set_timesteps_for_strength) → decode
//
// Random draws of device d (key_d = split(PRNGKey(seed), D)[d], as text-to-image):
//   noise: normal(key_d, (B, C, h, w))   — or GenerationRequest::latents
//   ε:     normal(key_d, (B, h, w, C))   — the same key (Flax samples the posterior with the
//          pipeline's prng_seed), NHWC as Flax's VAE returns its moments; or
//          GenerationRequest::posterior_noise (B, C, h, w), as diffusers' generator draws it.
//
// The images are always encoded by the model's VAE (AutoencoderKL), also with Decoder::Tiny
// (diffusers with vae=AutoencoderTiny would encode with TAESD's encoder: not done here).
// LCM runs its own strength grid (LatentConsistencyModelImg2ImgPipeline's set_timesteps(N,
// strength)) whatever the UNet; diffusers' StableDiffusionImg2ImgPipeline with an LCMScheduler
// would cut the full grid instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "models/autoencoder_kl.h"
#include "pipeline/generation.h"
#include "random/jax_prng.h"
#include "schedulers/scheduler.h"

namespace octodiff {

// The multiple an init image's sides are floored to: 32 in the Flax pipeline's prepare_inputs,
// the VAE scale factor in diffusers' VaeImageProcessor.
int init_image_multiple(Compat compat, int vae_scale_factor);

// An init image as the pipeline's preprocessing leaves it: each side floored to `multiple` and
// the image resized to that with PIL's Lanczos (io/image.h resize_lanczos) when it differs.
// Throws octodiff::Error naming `what` for a side smaller than `multiple`.
Image8 prepare_init_image(const Image8& image, int multiple, const std::string& what);

// Device d's images (B, 3, H, W) in [-1, 1]: images[0] when there is one, else images[d], for
// each of the B slots (2·x/255 − 1 in float32, as (x/255)·2 − 1).
Tensor device_init_images(const std::vector<Image8>& images, int device, int batch);

// Device d's ε of the posterior sample, (B, C, h, w): slice d of `given` (D, B, C, h, w), else
// normal(key, (B, h, w, C)) transposed to NCHW.
Tensor device_posterior_noise(const std::optional<Tensor>& given, const jax::Key& key, jax::RngScheme rng, int device,
                              const Shape& nchw);

// Image latents (B, C, h, w) from images (B, 3, H, W): the encoder's moments [mean | logvar],
// logvar clamped to [−30, 20], mean + exp(logvar/2)·eps, times the VAE's scaling_factor — in
// float32, as both pipelines' DiagonalGaussianDistribution.sample.
Tensor sample_image_latents(const AutoencoderKL& vae, const Tensor& images, const Tensor& eps);

// The sample the loop starts from, (B, h, w, C): scheduler.add_noise(state, latents, noise,
// state.begin_index) on the NCHW tensors; under Flax then × init_noise_sigma, as the Flax
// pipeline does. (For LMS/Euler/Euler ancestral, which the Flax pipeline cannot run — JAX
// refuses their float timesteps as indices — and whose init_noise_sigma (≈ 14.6) would ruin the
// sample, Octodiff uses the torch pipeline's rule: no multiplication.)
Tensor noised_start_latents(const Scheduler& scheduler, const SchedulerState& state, const Tensor& image_latents,
                            const Tensor& noise, Compat compat);

}  // namespace octodiff
