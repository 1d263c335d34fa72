#include "pipeline/latents.h"

#include <cstring>

#include "models/layers.h"

namespace octodiff {

Tensor device_initial_noise(const std::optional<Tensor>& given, const jax::Key& key, jax::RngScheme rng, int d,
                            const Shape& shape) {
  Tensor noise = Tensor::empty(shape);
  const int64_t n = noise.numel();
  if (given)
    std::memcpy(noise.data(), given->data() + d * n, sizeof(float) * n);
  else
    jax::normal_into(key, n, rng, noise.data());
  return noise;
}

Tensor to_sampling_layout(const Tensor& nchw, float sigma) {
  Tensor x = to_nhwc(nchw);
  for (float& v : x) v = v * sigma;
  return x;
}

}  // namespace octodiff
