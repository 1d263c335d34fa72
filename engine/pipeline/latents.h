// Stage 2: the initial latents of one device, and moving latents between the layout results
// use (NCHW, as the Flax pipeline draws and returns them) and the one sampling runs in (NHWC).
#pragma once

#include <optional>

#include "core/tensor.h"
#include "random/jax_prng.h"

namespace octodiff {

// Device d's initial noise, (B, C, h, w): slice d of `given` (D, B, C, h, w) when a caller
// injected latents, else normal(key_d, (B, C, h, w)) — the Flax pipeline's
// `jax.random.normal(prng_seed, shape)` on each device.
Tensor device_initial_noise(const std::optional<Tensor>& given, const jax::Key& key, jax::RngScheme rng, int device,
                            const Shape& shape);

// (B, C, h, w) → (B, h, w, C), every value multiplied by `sigma` (the scheduler's init_noise_sigma).
Tensor to_sampling_layout(const Tensor& nchw, float sigma);

}  // namespace octodiff
