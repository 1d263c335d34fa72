// CLIPTextModelWithProjection — SDXL's second text tower (OpenCLIP ViT-bigG/14 in transformers'
// layout): the CLIPTextModel of clip_text_model.h, plus
//
//   pooled      = last_hidden_state at each row's EOS position (clip_eos_positions)
//   text_embeds = text_projection(pooled)          (no bias; hidden → projection_dim)
//
// SDXL takes its penultimate hidden states (the context) and text_embeds (the pooled condition).
#pragma once

#include <cstdint>
#include <vector>

#include "models/clip_text_model.h"

namespace octodiff {

struct ClipTextProjectionOutput {
  Tensor last_hidden_state;  // N × L × hidden, after the final LayerNorm
  Tensor penultimate;        // N × L × hidden, hidden_states[-2] (before the final LayerNorm)
  Tensor pooled;             // N × hidden: last_hidden_state at the EOS positions (pooler_output)
  Tensor text_embeds;        // N × projection_dim
};

class ClipTextModelWithProjection {
 public:
  // Reads text_projection.weight (projection_dim × hidden) and every CLIPTextModel parameter from
  // `w`, then calls w.finish().
  static ClipTextModelWithProjection load(WeightSource& w, const ClipTextConfig& config);

  // ids: N × L token ids, as ClipTextModel::forward.
  ClipTextProjectionOutput forward(const std::vector<int32_t>& ids, int64_t batch, int64_t length) const;
  // inputs_embeds: N × L × hidden token embeddings (ClipTextModel::embed_tokens, rows possibly
  // replaced, e.g. by textual-inversion vectors); ids: their N × L ids, which place the pooled EOS.
  ClipTextProjectionOutput forward_embeddings(const Tensor& inputs_embeds, const std::vector<int32_t>& ids) const;

  const ClipTextModel& text_model() const { return text_model_; }
  const ClipTextConfig& config() const { return text_model_.config(); }

 private:
  ClipTextModel text_model_;
  Linear projection_;  // hidden → projection_dim, no bias, float32
};

// Each row's pooled position, as transformers' CLIPTextTransformer finds it: with
// eos_token_id == 2 (configs saved before transformers fixed the rule: SD's and SDXL's) the first
// position of the row's highest id (CLIP's <|endoftext|> is the last id of its vocabulary), else
// the first position holding eos_token_id (0 when there is none).
std::vector<int64_t> clip_eos_positions(const std::vector<int32_t>& ids, int64_t batch, int64_t length,
                                        int eos_token_id);

}  // namespace octodiff
