// Stage 1 of the SDXL pipeline (FlaxStableDiffusionXLPipeline.get_embeddings, diffusers'
// StableDiffusionXLPipeline.encode_prompt): both tokenizers, both text towers.
//
//   context     = encoder 1 hidden_states[-2] ‖ encoder 2 hidden_states[-2]   (rows × 77 × (768 + 1280))
//   text_embeds = encoder 2 text_embeds (its projected EOS token)            (rows × 1280)
//   time_ids    = (original h, w, crop top, left, target h, w)                (rows × 6)
//
// A negative row whose negative prompt is empty is zeros, context and text_embeds alike, when
// `zero_empty_negative` (the Flax pipeline without neg_prompt_ids; diffusers with negative_prompt
// None and force_zeros_for_empty_prompt).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/clip_text_model.h"
#include "models/clip_text_projection.h"
#include "models/unet_2d_condition.h"
#include "pipeline/generation.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/text_encoding_cache.h"
#include "text/clip_tokenizer.h"

namespace octodiff {

// Both tokenizers' ids of every image's prompt and negative prompt (D·B each, device-major).
struct SdxlTokenizedPrompts {
  std::vector<std::vector<int32_t>> cond_1, cond_2, uncond_1, uncond_2;  // the plain path's
  std::vector<bool> zero_uncond;  // per image: its negative row is zeros (then uncond_* are unused)
  int length = 0;                 // 77
  std::vector<std::string> warnings;
  // A1111 syntax, chunking or embeddings (pipeline/sdxl_prompt_chunks.h): each tower's layouts
  // (pipeline/prompt_encoding.h), the same chunks in both; empty on the plain path.
  TokenizedPrompts tower_1, tower_2;
  std::vector<std::string> embeddings_used;  // names, over all prompts
  bool uses_layouts() const { return tower_1.uses_layouts(); }
};

// How SDXL prompts are read (PromptOptions for both towers). The embeddings are the same files
// seen by each tower: tokenizer 1's names with clip_l's vectors, tokenizer 2's with clip_g's.
struct SdxlPromptOptions {
  PromptSyntax syntax = PromptSyntax::Plain;
  LongPrompts long_prompts = LongPrompts::Truncate;
  int comma_backtrack = 0;
  const EmbeddingVocabulary* embeddings_1 = nullptr;  // EmbeddingTower::SdxlFirst; may be null
  const EmbeddingVocabulary* embeddings_2 = nullptr;  // EmbeddingTower::SdxlSecond; null iff embeddings_1 is
};

// By default plain prompts in one 77-token window (the Flax pipeline's reading); errors name the prompt.
SdxlTokenizedPrompts tokenize_sdxl_prompts(const ClipTokenizer& tokenizer_1, const ClipTokenizer& tokenizer_2,
                                           const std::vector<std::string>& prompts,
                                           const std::vector<std::string>& negative_prompts,
                                           bool zero_empty_negative, const SdxlPromptOptions& options = {});

// The six time ids of an image of height × width: (h, w, 0, 0, h, w) by default; the fields of
// `size` that are set (non-zero, diffusers' original_size / crops_coords_top_left / target_size)
// replace theirs. Throws octodiff::Error for negative values.
std::array<float, 6> sdxl_time_ids(const SdxlSizeConditioning& size, int height, int width);

struct SdxlConditioning {
  Tensor context;         // rows × 77k × (hidden_1 + hidden_2) (k chunks: 1 on the plain path)
  UNetTextTime text_time;  // text_embeds rows × projection_dim, time_ids rows × 6
};

// Device d's UNet conditioning: with guidance the B negative rows then the B prompts' rows
// ([uncond; cond], rows = 2B, both halves with the same time ids), else the prompts' alone.
// With a cache, rows (or chunks) it holds are not encoded again (text_encoding_cache.h).
SdxlConditioning encode_sdxl_device_prompts(const ClipTextModel& encoder_1, const ClipTextModelWithProjection& encoder_2,
                                            const SdxlTokenizedPrompts& tokens, int device, int batch, bool guidance,
                                            const std::array<float, 6>& time_ids, TextEncodingCache* cache = nullptr);

// Both towers' outputs for n rows of 77 tokens (or chunks), before any emphasis weights.
struct SdxlTowerRows {
  Tensor hidden_1;     // n × L × H1: tower 1's hidden_states[-2]
  Tensor hidden_2;     // n × L × H2: tower 2's hidden_states[-2]
  Tensor text_embeds;  // n × P: tower 2's projected EOS state
};
// Rows `keys` (one per row: what both towers read), from `cache` when it holds them, the others
// from one call of `encode` (the indices of the rows it must encode); without a cache, all of
// them from `encode`. L, H1, H2 and P are the shapes `encode` returns.
SdxlTowerRows sdxl_tower_rows(const std::vector<std::string>& keys, int64_t L, int64_t H1, int64_t H2, int64_t P,
                              const std::function<SdxlTowerRows(const std::vector<size_t>&)>& encode,
                              TextEncodingCache* cache);

}  // namespace octodiff
