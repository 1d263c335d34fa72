#include "pipeline/image_to_image.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/tensor_ops.h"
#include "pipeline/latents.h"

#pragma GCC optimize("fp-contract=off")

namespace octodiff {

int init_image_multiple(Compat compat, int vae_scale_factor) {
  return compat == Compat::Flax ? 32 : vae_scale_factor;
}

Image8 prepare_init_image(const Image8& image, int multiple, const std::string& what) {
  const int w = image.width - image.width % multiple, h = image.height - image.height % multiple;
  if (w <= 0 || h <= 0)
    fail(what, " is ", image.width, "×", image.height, " pixels; image-to-image needs at least ", multiple,
         " pixels per side");
  if (w == image.width && h == image.height) return image;
  return resize_lanczos(image, w, h);
}

Tensor device_init_images(const std::vector<Image8>& images, int device, int batch) {
  const Image8& image = images.size() == 1 ? images[0] : images.at(device);
  const int H = image.height, W = image.width;
  Tensor out = Tensor::empty({batch, 3, H, W});
  const int64_t plane = int64_t{H} * W;
  for (int c = 0; c < 3; ++c)
    for (int64_t p = 0; p < plane; ++p) {
      // torch/numpy: (x / 255) in float32, then 2·x − 1.
      const float unit = static_cast<float>(image.rgb[p * 3 + c]) / 255.0f;
      out[c * plane + p] = 2.0f * unit - 1.0f;
    }
  for (int b = 1; b < batch; ++b) std::memcpy(out.data() + b * 3 * plane, out.data(), sizeof(float) * 3 * plane);
  return out;
}

Tensor device_posterior_noise(const std::optional<Tensor>& given, const jax::Key& key, jax::RngScheme rng, int d,
                              const Shape& nchw) {
  if (given) return device_initial_noise(given, key, rng, d, nchw);
  Tensor nhwc = Tensor::empty({nchw[0], nchw[2], nchw[3], nchw[1]});
  jax::normal_into(key, nhwc.numel(), rng, nhwc.data());
  Tensor out = Tensor::empty(nchw);
  kernels::nhwc_to_nchw(nhwc.data(), nchw[0], nchw[2], nchw[3], nchw[1], out.data());
  return out;
}

Tensor sample_image_latents(const AutoencoderKL& vae, const Tensor& images, const Tensor& eps) {
  if (!vae.has_encoder())
    fail("image-to-image needs the VAE encoder: load the model with ModelLoadOptions::load_vae_encoder");
  const Tensor moments = vae.encode_moments(images);  // (B, 2C, h, w)
  const int64_t B = moments.dim(0), C = moments.dim(1) / 2, plane = moments.dim(2) * moments.dim(3);
  if (eps.shape() != Shape{B, C, moments.dim(2), moments.dim(3)})
    fail("the posterior noise has shape ", shape_str(eps.shape()), "; the encoder made moments ",
         shape_str(moments.shape()));
  const float scaling = static_cast<float>(vae.config().scaling_factor);
  Tensor latents = Tensor::empty(eps.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float* mean = moments.data() + (b * 2 * C + c) * plane;
      const float* logvar = mean + C * plane;
      const float* e = eps.data() + (b * C + c) * plane;
      float* out = latents.data() + (b * C + c) * plane;
      for (int64_t p = 0; p < plane; ++p) {
        const float std_dev = std::exp(0.5f * std::clamp(logvar[p], -30.0f, 20.0f));
        out[p] = scaling * (mean[p] + std_dev * e[p]);
      }
    }
  return latents;
}

Tensor noised_start_latents(const Scheduler& scheduler, const SchedulerState& state, const Tensor& image_latents,
                            const Tensor& noise, Compat compat) {
  const Tensor noised = scheduler.add_noise(state, image_latents, noise, state.begin_index);
  const SchedulerKind k = scheduler.kind();
  const bool sigma_family =
      k == SchedulerKind::Lms || k == SchedulerKind::Euler || k == SchedulerKind::EulerAncestral;
  const double sigma = compat == Compat::Flax && !sigma_family ? scheduler.init_noise_sigma(state) : 1.0;
  return to_sampling_layout(noised, static_cast<float>(sigma));
}

}  // namespace octodiff
