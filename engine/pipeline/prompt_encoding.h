// Stage 1 of every pipeline: prompts → token ids (on the host, as the Flax pipeline's
// prepare_inputs) → text embeddings per device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/clip_text_model.h"
#include "pipeline/prompt_chunks.h"
#include "pipeline/text_encoding_cache.h"
#include "text/clip_tokenizer.h"

namespace octodiff {

// How prompts are read (pipeline/prompt_chunks.h). The defaults are the Flax pipeline's: plain
// text, one 77-token window.
struct PromptOptions {
  PromptSyntax syntax = PromptSyntax::Plain;
  LongPrompts long_prompts = LongPrompts::Truncate;
  int comma_backtrack = 0;
  const EmbeddingVocabulary* embeddings = nullptr;  // textual inversions; may be null
  int skipped_layers = 0;  // the text encoder's last layers not run (diffusers' clip_skip)
};

// Every image's prompt and negative prompt (D·B each, device-major), and the warnings for
// prompts that were truncated. Plain truncated prompts without embeddings (the defaults) are
// token ids padded to `length`, encoded as the Flax pipeline does; anything else is a
// PromptLayout per prompt (chunks with weights and embedding vectors).
struct TokenizedPrompts {
  std::vector<std::vector<int32_t>> cond, uncond;
  int length = 0;
  std::vector<PromptLayout> cond_layouts, uncond_layouts;  // empty on the plain path
  PromptLayout empty;                                      // the empty prompt: padding chunks
  std::vector<std::string> embeddings_used;                // names, over all prompts
  std::vector<std::string> warnings;
  int skipped_layers = 0;  // PromptOptions::skipped_layers
  bool uses_layouts() const { return !cond_layouts.empty(); }
};

// The text encoder's last layers not run for A1111's "Clip skip" (GenerationRequest::clip_skip):
// clip_skip − 1. Throws octodiff::Error unless 1 ≤ clip_skip ≤ the encoder's layers.
int clip_skip_layers(int clip_skip, const ClipTextConfig& encoder);

// Throws octodiff::Error naming the prompt ("prompt 3: ...") a tokenizer cannot take.
TokenizedPrompts tokenize_prompts(const ClipTokenizer& tokenizer, const std::vector<std::string>& prompts,
                                  const std::vector<std::string>& negative_prompts,
                                  const PromptOptions& options = {});

// Device d's context for the UNet, (rows, length, hidden): with guidance the B negative
// prompts' embeddings then the B prompts' ([uncond; cond], rows = 2B), else the prompts' alone.
// With layouts, length = 77 × the most chunks any of these rows has (the others padded).
// With a cache, rows it holds are not encoded again (text_encoding_cache.h: the same bits).
Tensor encode_device_prompts(const ClipTextModel& encoder, const TokenizedPrompts& tokens, int device, int batch,
                             bool guidance, TextEncodingCache* cache = nullptr);

}  // namespace octodiff
