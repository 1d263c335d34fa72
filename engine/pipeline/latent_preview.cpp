#include "pipeline/latent_preview.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <Eigen/Dense>

#include "core/device.h"

namespace octodiff {

LatentPreview LatentPreview::fit(const AutoencoderKL& vae, double scaling_factor) {
  const int C = vae.config().latent_channels;
  const int f = vae.config().scale_factor();
  const int h = 8, w = 8;
  // A deterministic pseudo-random latent at the scale the sampler produces (unit variance / sf).
  Tensor z = Tensor::empty({1, h, w, C});
  uint32_t state = 12345;
  for (int64_t i = 0; i < z.numel(); ++i) {
    double u1 = 0, u2 = 0;
    state = state * 1664525u + 1013904223u;
    u1 = (state >> 8) * (1.0 / 16777216.0) + 1e-9;
    state = state * 1664525u + 1013904223u;
    u2 = (state >> 8) * (1.0 / 16777216.0);
    z[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  Tensor image = vae.decode_nhwc(z);  // 1 × h·f × w·f × 3, roughly in [-1, 1]

  // Rows: latent pixels with a bias column; targets: mean colour of each f × f patch.
  Eigen::MatrixXd A(h * w, C + 1);
  Eigen::MatrixXd B(h * w, 3);
  const int W = w * f;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int r = y * w + x;
      for (int k = 0; k < C; ++k) A(r, k) = z[r * C + k];
      A(r, C) = 1.0;
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int dy = 0; dy < f; ++dy)
          for (int dx = 0; dx < f; ++dx) sum += image[((y * f + dy) * W + (x * f + dx)) * 3 + c];
        B(r, c) = sum / (f * f);
      }
    }
  }
  Eigen::MatrixXd X = A.colPivHouseholderQr().solve(B);  // (C+1) × 3
  LatentPreview p;
  p.channels_ = C;
  p.scale_ = 1.0 / scaling_factor;
  p.weight_.resize(C);
  for (int k = 0; k < C; ++k)
    for (int c = 0; c < 3; ++c) p.weight_[k][c] = X(k, c);
  for (int c = 0; c < 3; ++c) p.bias_[c] = X(C, c);
  return p;
}

Image8 LatentPreview::render(const float* latents, int h, int w) const {
  Image8 img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int i = 0; i < h * w; ++i) {
    for (int c = 0; c < 3; ++c) {
      double v = bias_[c];
      for (int k = 0; k < channels_; ++k) v += weight_[k][c] * latents[i * channels_ + k] * scale_;
      double u8 = std::clamp((v / 2 + 0.5) * 255.0, 0.0, 255.0);
      img.rgb[static_cast<size_t>(i) * 3 + c] = static_cast<uint8_t>(std::lround(u8));
    }
  }
  return img;
}

}  // namespace octodiff
