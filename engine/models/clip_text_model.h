// CLIPTextModel — the text tower of CLIP (SD 1.x: OpenAI ViT-L/14; SD 2.x: OpenCLIP ViT-H/14 in
// transformers' layout), read top to bottom like the original:
//
//   x = token_embedding[ids] + position_embedding[0..L)
//   for each layer:  x += out_proj(causal_self_attention(layer_norm1(x)))
//                    x += fc2(act(fc1(layer_norm2(x))))
//   last_hidden_state = final_layer_norm(x)
//
// With `skip` (diffusers' clip_skip, A1111's "Clip skip" minus 1) the last `skip` layers are not
// run: x is then hidden_states[-(skip + 1)] of the whole tower, as those pipelines take it.
//
// Padding tokens are attended (the SD pipelines pass no attention mask; only the causal mask acts).
#pragma once

#include <cstdint>
#include <vector>

#include "io/weight_source.h"
#include "models/clip_encoder.h"
#include "models/configs.h"
#include "models/layers.h"

namespace octodiff {

struct ClipTextOutput {
  Tensor last_hidden_state;  // N × L × hidden, after the final LayerNorm (what SD uses)
  Tensor penultimate;        // N × L × hidden, output of the second-to-last layer run (before final LN)
};

class ClipTextModel {
 public:
  // Reads every parameter from `w` (diffusers/transformers names, with or without the
  // "text_model." prefix) and calls w.finish().
  static ClipTextModel load(WeightSource& w, const ClipTextConfig& config);

  // ids: N × L token ids (L <= max_position_embeddings); ids outside the vocabulary are an error.
  // Same as forward_embeddings(embed_tokens(ids, batch, length), skip).
  ClipTextOutput forward(const std::vector<int32_t>& ids, int64_t batch, int64_t length, int skip = 0) const;

  // The token-embedding layer alone: N × L × hidden rows of the token embedding (the same checks
  // as forward). Callers may replace rows, e.g. by textual-inversion vectors, then call
  // forward_embeddings — transformers' `inputs_embeds` path.
  Tensor embed_tokens(const std::vector<int32_t>& ids, int64_t batch, int64_t length) const;
  // inputs_embeds: N × L × hidden (L <= max_position_embeddings); adds the position embeddings
  // and runs the layers, all but the last `skip` (0 ≤ skip < num_hidden_layers, else an error).
  ClipTextOutput forward_embeddings(const Tensor& inputs_embeds, int skip = 0) const;

  const ClipTextConfig& config() const { return config_; }

 private:
  ClipTextConfig config_;
  Tensor token_embedding;     // vocab × hidden
  Tensor position_embedding;  // positions × hidden
  std::vector<ClipEncoderLayer> layers_;  // causal
  LayerNorm final_norm_;
};

}  // namespace octodiff
