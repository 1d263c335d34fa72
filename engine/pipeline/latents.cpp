#include "pipeline/latents.h"

#include <cstring>

#include "kernels/tensor_ops.h"

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
  const int B = static_cast<int>(nchw.dim(0)), C = static_cast<int>(nchw.dim(1));
  const int h = static_cast<int>(nchw.dim(2)), w = static_cast<int>(nchw.dim(3));
  Tensor x = Tensor::empty({B, h, w, C});
  kernels::nchw_to_nhwc(nchw.data(), B, C, h, w, x.data());
  for (float& v : x) v = v * sigma;
  return x;
}

}  // namespace octodiff
