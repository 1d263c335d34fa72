#include "pipeline/decode.h"

#include <algorithm>

namespace octodiff {

Tensor decode_with_vae(const AutoencoderKL& vae, const Tensor& latents, Compat compat, const VaeTiling* tiles) {
  const double sf = vae.config().scaling_factor;
  Tensor z = Tensor::empty(latents.shape());
  if (compat == Compat::Flax) {
    const float inv = static_cast<float>(1.0 / sf);
    for (int64_t k = 0; k < z.numel(); ++k) z[k] = latents[k] * inv;
  } else {
    const float sf32 = static_cast<float>(sf);
    for (int64_t k = 0; k < z.numel(); ++k) z[k] = latents[k] / sf32;
  }
  Tensor img = tiles ? tiled_decode_nhwc(vae, z, *tiles) : vae.decode_nhwc(z);
  for (float& v : img) v = std::clamp(v / 2.0f + 0.5f, 0.0f, 1.0f);
  return img;
}

}  // namespace octodiff

namespace octodiff {

Tensor decode_with_tiny_autoencoder(const AutoencoderTiny& tiny, const Tensor& latents) {
  return tiny.decode_nhwc(latents);  // (x/2 + 0.5) clamped, as decode_with_vae
}

}  // namespace octodiff
