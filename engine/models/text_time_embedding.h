// SDXL's added conditioning (diffusers' addition_embed_type "text_time"), which the SDXL UNet and
// an SDXL ControlNet (models/controlnet.h) both add to their time embedding:
//
//   aug_emb = add_embedding(text_embeds ‖ add_time_proj(time_ids))
//   add_time_proj: the sinusoidal timestep embedding of each id (addition_time_embed_dim values)
//   add_embedding: linear_1 (projection_class_embeddings_input_dim → 4·C0), SiLU, linear_2
#pragma once

#include <string>

#include "core/tensor.h"
#include "models/configs.h"
#include "models/layers.h"

namespace octodiff {

// SDXL's added conditioning (addition_embed_type "text_time", diffusers' added_cond_kwargs).
struct UNetTextTime {
  Tensor text_embeds;  // N × P: the pooled text embedding (text encoder 2's text_embeds)
  // N × k float32 (SDXL: k = 6): original size (h, w), crop top-left (y, x), target size (h, w);
  // P + k · addition_time_embed_dim must be projection_class_embeddings_input_dim.
  Tensor time_ids;
};

class TextTimeEmbedding {
 public:
  // add_embedding.linear_1 / linear_2 of a model whose config has text_time().
  static TextTimeEmbedding load(WeightSource& w, const UNetConfig& c, kernels::Precision precision);

  // aug_emb for N samples: N × 4·C0. `owner` names the network in errors ("UNet", "ControlNet").
  Tensor operator()(const UNetTextTime& text_time, int64_t N, const char* owner) const;

 private:
  int64_t time_embed_dim_ = 0;  // addition_time_embed_dim: sinusoid values per id
  int64_t input_dim_ = 0;       // projection_class_embeddings_input_dim
  bool flip_sin_to_cos_ = true;
  double freq_shift_ = 0;
  Linear linear_1_, linear_2_;
};

}  // namespace octodiff
