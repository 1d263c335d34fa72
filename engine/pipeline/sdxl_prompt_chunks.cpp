#include "pipeline/sdxl_prompt_chunks.h"

#include <cstring>

#include "core/error.h"
#include "io/textual_inversion.h"
#include "pipeline/model.h"

namespace octodiff {
namespace {

void check_same_chunks(const std::vector<PromptLayout>& first, const std::vector<PromptLayout>& second,
                       const char* what) {
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i].chunks.size() != second[i].chunks.size())
      fail(what, " ", i + 1, ": the SDXL tokenizers lay it out in ", first[i].chunks.size(), " (tokenizer/) and ",
           second[i].chunks.size(), " (tokenizer_2/) chunks of ", kChunkTokens, " tokens");
}

// The rows of device d's UNet batch ([uncond; cond] or cond) in one tower; nullptr: a zero row.
std::vector<const PromptLayout*> device_rows(const TokenizedPrompts& tower, const std::vector<bool>& zero_uncond,
                                             int d, int B, bool guidance) {
  std::vector<const PromptLayout*> rows;
  if (guidance)
    for (int b = 0; b < B; ++b) rows.push_back(zero_uncond[d * B + b] ? nullptr : &tower.uncond_layouts[d * B + b]);
  for (int b = 0; b < B; ++b) rows.push_back(&tower.cond_layouts[d * B + b]);
  return rows;
}

std::vector<const PromptLayout*> non_null(const std::vector<const PromptLayout*>& rows) {
  std::vector<const PromptLayout*> out;
  for (const PromptLayout* r : rows)
    if (r) out.push_back(r);
  return out;
}

// Row j of `hidden` (n × T × w) into columns [offset, offset + w) of row `to` of `dst` (N × T × W).
void put_columns(const Tensor& hidden, int64_t j, Tensor& dst, int64_t to, int64_t offset) {
  const int64_t T = dst.dim(1), W = dst.dim(2), w = hidden.dim(2);
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(dst.data() + (to * T + t) * W + offset, hidden.data() + (j * T + t) * w, sizeof(float) * w);
}

}  // namespace

SdxlTokenizedPrompts sdxl_layouts(TokenizedPrompts tower_1, TokenizedPrompts tower_2,
                                  const std::vector<std::string>& negative_prompts, bool zero_empty_negative) {
  check_same_chunks(tower_1.cond_layouts, tower_2.cond_layouts, "prompt");
  check_same_chunks(tower_1.uncond_layouts, tower_2.uncond_layouts, "negative prompt");
  SdxlTokenizedPrompts t;
  t.length = tower_1.length;
  t.warnings = std::move(tower_1.warnings);  // the same words in both: the same warnings
  t.embeddings_used = tower_1.embeddings_used;
  for (const std::string& negative : negative_prompts) t.zero_uncond.push_back(zero_empty_negative && negative.empty());
  t.tower_1 = std::move(tower_1);
  t.tower_2 = std::move(tower_2);
  return t;
}

SdxlConditioning encode_sdxl_device_layouts(const ClipTextModel& encoder_1,
                                            const ClipTextModelWithProjection& encoder_2,
                                            const SdxlTokenizedPrompts& tokens, int d, int B, bool guidance,
                                            const std::array<float, 6>& time_ids, TextEncodingCache* cache) {
  constexpr int64_t kL = kChunkTokens + 2;
  const std::vector<const PromptLayout*> rows_1 = device_rows(tokens.tower_1, tokens.zero_uncond, d, B, guidance);
  const std::vector<const PromptLayout*> rows_2 = device_rows(tokens.tower_2, tokens.zero_uncond, d, B, guidance);
  const std::vector<const PromptLayout*> encoded_1 = non_null(rows_1), encoded_2 = non_null(rows_2);
  const size_t k = most_chunks(encoded_1);  // tower 2's rows have the same chunks (sdxl_layouts)
  const std::vector<const PromptChunk*> chunks_1 = padded_chunks(encoded_1, tokens.tower_1.empty, k);
  const std::vector<const PromptChunk*> chunks_2 = padded_chunks(encoded_2, tokens.tower_2.empty, k);

  const int64_t H1 = encoder_1.config().hidden_size, H2 = encoder_2.config().hidden_size;
  const int64_t P = encoder_2.config().projection_dim;
  std::vector<std::string> keys;  // a chunk pair: what both towers read
  for (size_t i = 0; i < chunks_1.size(); ++i) keys.push_back(chunk_key(*chunks_1[i]) + chunk_key(*chunks_2[i]));
  SdxlTowerRows out = sdxl_tower_rows(
      keys, kL, H1, H2, P,
      [&](const std::vector<size_t>& which) {
        std::vector<const PromptChunk*> some_1, some_2;
        for (size_t i : which) {
          some_1.push_back(chunks_1[i]);
          some_2.push_back(chunks_2[i]);
        }
        std::vector<int32_t> ids_1, ids_2;
        Tensor hidden_1 = encoder_1.forward_embeddings(embed_chunks(encoder_1, some_1, &ids_1)).penultimate;
        const Tensor embeds_2 = embed_chunks(encoder_2.text_model(), some_2, &ids_2);
        ClipTextProjectionOutput out_2 = encoder_2.forward_embeddings(embeds_2, ids_2);  // ids_2 place the EOS
        return SdxlTowerRows{std::move(hidden_1), std::move(out_2.penultimate), std::move(out_2.text_embeds)};
      },
      cache);
  Tensor& hidden_1 = out.hidden_1;
  apply_chunk_weights(hidden_1, chunks_1);  // (n·k) × 77 × H1
  apply_chunk_weights(out.hidden_2, chunks_2);  // (n·k) × 77 × H2

  const int64_t N = static_cast<int64_t>(rows_1.size()), T = static_cast<int64_t>(k) * kL;
  const Tensor z1 = hidden_1.reshaped({static_cast<int64_t>(encoded_1.size()), T, H1});
  const Tensor z2 = out.hidden_2.reshaped({static_cast<int64_t>(encoded_2.size()), T, H2});
  SdxlConditioning c;
  c.context = Tensor::zeros({N, T, H1 + H2});
  c.text_time.text_embeds = Tensor::zeros({N, P});
  c.text_time.time_ids = Tensor::empty({N, 6});
  int64_t j = 0;  // the encoded row
  for (int64_t r = 0; r < N; ++r) {
    std::memcpy(c.text_time.time_ids.data() + r * 6, time_ids.data(), sizeof(float) * 6);
    if (!rows_1[r]) continue;  // zeros
    put_columns(z1, j, c.context, r, 0);
    put_columns(z2, j, c.context, r, H1);
    const int64_t first_chunk = j * static_cast<int64_t>(k);  // pooled from the first chunk
    std::memcpy(c.text_time.text_embeds.data() + r * P, out.text_embeds.data() + first_chunk * P, sizeof(float) * P);
    ++j;
  }
  return c;
}

SdxlTokenizedPrompts tokenize_sdxl_request(const StableDiffusionModel& m, const GenerationRequest& request,
                                           const std::vector<std::string>& prompts,
                                           const std::vector<std::string>& negative_prompts,
                                           bool zero_empty_negative, GenerationResult& result) {
  if (request.comma_backtrack < 0 || request.comma_backtrack >= kChunkTokens)
    fail("comma backtrack ", request.comma_backtrack, " must be in 0..", kChunkTokens - 1);
  SdxlPromptOptions options{request.prompt_syntax, request.long_prompts, request.comma_backtrack, nullptr, nullptr};
  TextualInversionLibrary library;  // the vocabularies point into it: filled once, never moved
  EmbeddingVocabulary vocabulary_1, vocabulary_2;
  if (!request.embeddings_dir.empty()) {
    library = read_textual_inversion_folder(request.embeddings_dir);
    vocabulary_1 = EmbeddingVocabulary(library, m.tokenizer(), m.text_encoder().config().hidden_size,
                                       EmbeddingTower::SdxlFirst);
    vocabulary_2 = EmbeddingVocabulary(library, m.tokenizer_2(), m.text_encoder_2().config().hidden_size,
                                       EmbeddingTower::SdxlSecond);
    options.embeddings_1 = &vocabulary_1;
    options.embeddings_2 = &vocabulary_2;
  }
  // The layouts keep the embeddings' vectors (shared storage), not the library.
  SdxlTokenizedPrompts tokens =
      tokenize_sdxl_prompts(m.tokenizer(), m.tokenizer_2(), prompts, negative_prompts, zero_empty_negative, options);
  result.warnings = tokens.warnings;
  result.embeddings.clear();
  for (const std::string& name : tokens.embeddings_used)
    for (const auto& e : library.entries)
      if (e.embedding.name == name) result.embeddings.push_back({name, e.embedding.path.string()});
  return tokens;
}

}  // namespace octodiff
