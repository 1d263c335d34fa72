#include "models/distinct_samples.h"

#include <algorithm>
#include <cstring>

namespace octodiff {
namespace {

bool same_rows(const Tensor& t, int64_t m, int64_t n) {
  const int64_t per = t.numel() / std::max<int64_t>(t.dim(0), 1);
  return std::memcmp(t.data() + m * per, t.data() + n * per, per * sizeof(float)) == 0;
}

}  // namespace

DistinctSamples distinct_samples(const Tensor& sample, const std::vector<double>& timesteps, const Tensor* also) {
  const int64_t N = sample.dim(0);
  DistinctSamples d;
  for (int64_t n = 0; n < N; ++n) {
    int64_t slot = static_cast<int64_t>(d.rows.size());
    for (size_t k = 0; k < d.rows.size(); ++k) {
      const int64_t m = d.rows[k];
      if (timesteps[m] == timesteps[n] && same_rows(sample, m, n) && (!also || same_rows(*also, m, n))) {
        slot = static_cast<int64_t>(k);
        break;
      }
    }
    if (slot == static_cast<int64_t>(d.rows.size())) d.rows.push_back(n);
    d.slot.push_back(slot);
  }
  return d;
}

}  // namespace octodiff
