#include "models/clip_text_model.h"

#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace octodiff {

ClipTextModel ClipTextModel::load(WeightSource& w, const ClipTextConfig& c) {
  // Recent transformers releases may save CLIPTextModel without the "text_model." prefix.
  const std::string p = w.has("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  ClipTextModel m;
  m.config_ = c;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.layer_norm_eps);
  m.token_embedding = stored_tensor(w, p + "embeddings.token_embedding.weight", {c.vocab_size, H});
  m.position_embedding = w.take(p + "embeddings.position_embedding.weight", {c.max_position_embeddings, H});
  w.ignore(p + "embeddings.position_ids");  // a buffer older files carry; not a weight
  w.ignore("text_projection.weight");       // CLIP's projection head; SD uses hidden states
  // Always float32 (ClipEncoderLayer), as the Flax pipeline runs its text encoder whatever its dtype.
  const ClipEncoderLayerShape shape{H, c.intermediate_size, c.num_attention_heads, eps,
                                    parse_clip_activation(c.hidden_act), /*causal=*/true};
  for (int i = 0; i < c.num_hidden_layers; ++i)
    m.layers_.push_back(ClipEncoderLayer::load(w, p + "encoder.layers." + std::to_string(i) + ".", shape));
  m.final_norm_ = LayerNorm::load(w, p + "final_layer_norm", H, eps);
  w.finish();
  return m;
}

ClipTextOutput ClipTextModel::forward(const std::vector<int32_t>& ids, int64_t N, int64_t L, int skip) const {
  return forward_embeddings(embed_tokens(ids, N, L), skip);
}

Tensor ClipTextModel::embed_tokens(const std::vector<int32_t>& ids, int64_t N, int64_t L) const {
  const int64_t H = config_.hidden_size;
  if (static_cast<int64_t>(ids.size()) != N * L) fail("internal: ", ids.size(), " ids for ", N, "×", L);
  Tensor x = Tensor::empty({N, L, H});
  for (int64_t i = 0; i < N * L; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= config_.vocab_size)
      fail("token id ", id, " is outside the text encoder's vocabulary of ", config_.vocab_size,
           " (does the tokenizer belong to this model?)");
    std::memcpy(x.data() + i * H, token_embedding.data() + int64_t{id} * H, sizeof(float) * H);
  }
  return x;
}

ClipTextOutput ClipTextModel::forward_embeddings(const Tensor& inputs_embeds, int skip) const {
  const int64_t H = config_.hidden_size;
  if (skip < 0 || skip >= static_cast<int>(layers_.size()))
    fail("cannot skip ", skip, " of the text encoder's ", layers_.size(), " layers (at least one must run)");
  const size_t run = layers_.size() - static_cast<size_t>(skip);
  if (inputs_embeds.rank() != 3 || inputs_embeds.dim(2) != H)
    fail("internal: text encoder input embeddings of shape ", shape_str(inputs_embeds.shape()),
         ", expected N × L × ", H);
  const int64_t N = inputs_embeds.dim(0), L = inputs_embeds.dim(1);
  if (L > config_.max_position_embeddings)
    fail("prompt of ", L, " tokens is longer than the text encoder's ", config_.max_position_embeddings,
         " positions");
  Tensor x = Tensor::empty({N, L, H});
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < L; ++t) {
      const float* tok = inputs_embeds.data() + (n * L + t) * H;
      const float* pos = position_embedding.data() + t * H;
      float* dst = x.data() + (n * L + t) * H;
      for (int64_t c = 0; c < H; ++c) dst[c] = tok[c] + pos[c];
    }
  }

  ClipTextOutput out;
  for (size_t i = 0; i < run; ++i) {
    check_cancelled();
    if (i + 1 == run) out.penultimate = x;
    x = layers_[i](x);
  }
  out.last_hidden_state = final_norm_(x);
  return out;
}

}  // namespace octodiff
