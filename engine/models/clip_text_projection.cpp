#include "models/clip_text_projection.h"

#include <cstring>

#include "core/error.h"

namespace octodiff {

ClipTextModelWithProjection ClipTextModelWithProjection::load(WeightSource& w, const ClipTextConfig& c) {
  ClipTextModelWithProjection m;
  // Float32 like the rest of the text tower (the Flax pipeline runs its text encoders in f32).
  m.projection_ = Linear::load(w, "text_projection", c.hidden_size, c.projection_dim, /*has_bias=*/false,
                               kernels::Precision::F32);
  m.text_model_ = ClipTextModel::load(w, c);  // the rest; checks that nothing is left over
  return m;
}

std::vector<int64_t> clip_eos_positions(const std::vector<int32_t>& ids, int64_t N, int64_t L, int eos_token_id) {
  if (static_cast<int64_t>(ids.size()) != N * L) fail("internal: ", ids.size(), " ids for ", N, "×", L);
  std::vector<int64_t> positions(N, 0);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t* row = ids.data() + n * L;
    for (int64_t t = 1; t < L; ++t) {
      if (eos_token_id == 2) {
        if (row[t] > row[positions[n]]) positions[n] = t;  // strictly greater: the first maximum
      } else if (row[t] == eos_token_id && row[positions[n]] != eos_token_id) {
        positions[n] = t;
        break;
      }
    }
  }
  return positions;
}

ClipTextProjectionOutput ClipTextModelWithProjection::forward(const std::vector<int32_t>& ids, int64_t N,
                                                              int64_t L) const {
  return forward_embeddings(text_model_.embed_tokens(ids, N, L), ids);
}

ClipTextProjectionOutput ClipTextModelWithProjection::forward_embeddings(const Tensor& inputs_embeds,
                                                                         const std::vector<int32_t>& ids) const {
  ClipTextOutput hidden = text_model_.forward_embeddings(inputs_embeds);
  const int64_t N = inputs_embeds.dim(0), L = inputs_embeds.dim(1);
  ClipTextProjectionOutput out;
  const int64_t H = config().hidden_size;
  out.pooled = Tensor::empty({N, H});
  const std::vector<int64_t> eos = clip_eos_positions(ids, N, L, config().eos_token_id);
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(out.pooled.data() + n * H, hidden.last_hidden_state.data() + (n * L + eos[n]) * H, sizeof(float) * H);
  out.text_embeds = projection_(out.pooled);
  out.last_hidden_state = std::move(hidden.last_hidden_state);
  out.penultimate = std::move(hidden.penultimate);
  return out;
}

}  // namespace octodiff
