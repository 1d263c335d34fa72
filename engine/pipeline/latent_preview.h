// A cheap per-step preview: each latent pixel mapped to RGB by an affine map (4 → 3).
//
// The map is not a constant from elsewhere: it is fitted for the loaded model, once, by decoding
// a small random latent with the model's own VAE and solving the least-squares problem between
// latent pixels and the average colour of the image patch each one becomes. So it works for the
// demo model's VAE as well as for SD's.
#pragma once

#include <array>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "models/autoencoder_kl.h"

namespace octodiff {

class LatentPreview {
 public:
  static LatentPreview fit(const AutoencoderKL& vae, double scaling_factor);
  // latents: h × w × C (one image, NHWC, as the sampler holds them; not yet unscaled).
  Image8 render(const float* latents, int h, int w) const;
  // Coefficients: rgb[c] = bias[c] + Σ_k weight[c][k]·latent[k] (latent already unscaled).
  int channels() const { return channels_; }

 private:
  int channels_ = 4;
  double scale_ = 1;                       // 1 / scaling_factor
  std::vector<std::array<double, 3>> weight_;  // channels × 3
  std::array<double, 3> bias_{};
};

}  // namespace octodiff
