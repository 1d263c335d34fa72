#include "models/text_time_embedding.h"

#include <cstring>

#include "core/error.h"
#include "kernels/activations.h"
#include "models/unet_2d_condition.h"

namespace octodiff {

TextTimeEmbedding TextTimeEmbedding::load(WeightSource& w, const UNetConfig& c, kernels::Precision precision) {
  TextTimeEmbedding e;
  e.time_embed_dim_ = c.addition_time_embed_dim;
  e.input_dim_ = c.projection_class_embeddings_input_dim;
  e.flip_sin_to_cos_ = c.flip_sin_to_cos;
  e.freq_shift_ = c.freq_shift;
  const int64_t T = c.time_embed_dim();
  e.linear_1_ = Linear::load(w, "add_embedding.linear_1", e.input_dim_, T, true, precision);
  e.linear_2_ = Linear::load(w, "add_embedding.linear_2", T, T, true, precision);
  return e;
}

Tensor TextTimeEmbedding::operator()(const UNetTextTime& tt, int64_t N, const char* owner) const {
  const int64_t D = time_embed_dim_, in = input_dim_;
  if (tt.text_embeds.rank() != 2 || tt.text_embeds.dim(0) != N || tt.time_ids.rank() != 2 || tt.time_ids.dim(0) != N)
    fail(owner, ": text_embeds ", shape_str(tt.text_embeds.shape()), " and time_ids ", shape_str(tt.time_ids.shape()),
         " must both have ", N, " rows");
  const int64_t P = tt.text_embeds.dim(1), k = tt.time_ids.dim(1);
  if (P + k * D != in)
    fail(owner, ": text_embeds of width ", P, " and ", k, " time ids × ", D, " make ", P + k * D,
         " values; add_embedding takes ", in, " (a text encoder 2 of another width, or another number of ids?)");
  // add_time_proj of the flattened ids, one sinusoid of D values per id, laid out per sample.
  std::vector<double> ids(tt.time_ids.begin(), tt.time_ids.end());
  const Tensor time_embeds = UNet2DCondition::timestep_embedding(ids, D, flip_sin_to_cos_, freq_shift_);
  Tensor joined = Tensor::empty({N, in});
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(joined.data() + n * in, tt.text_embeds.data() + n * P, sizeof(float) * P);
    std::memcpy(joined.data() + n * in + P, time_embeds.data() + n * k * D, sizeof(float) * k * D);
  }
  Tensor h = linear_1_(joined);
  kernels::silu(h.data(), h.numel(), h.data());
  return linear_2_(h);
}

}  // namespace octodiff
