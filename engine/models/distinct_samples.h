// Which samples of a batch repeat an earlier one (classifier-free guidance evaluates every latent
// twice, with the negative and with the positive prompt): the layers before the first
// cross-attention see no text and can run on the distinct samples only (UNet2DCondition,
// ControlNetModel). Every kernel computes each sample on its own, in the same order whatever the
// batch, so sharing changes no bit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace octodiff {

struct DistinctSamples {
  std::vector<int64_t> rows;  // the distinct samples, in order
  std::vector<int64_t> slot;  // for each sample, its row among them
  bool repeats() const { return rows.size() < slot.size(); }
};

// Samples n and m are the same when their rows of `sample`, their timesteps and their rows of
// `also` (when given, e.g. a time condition or a ControlNet's image embedding) are equal.
DistinctSamples distinct_samples(const Tensor& sample, const std::vector<double>& timesteps, const Tensor* also);

}  // namespace octodiff
