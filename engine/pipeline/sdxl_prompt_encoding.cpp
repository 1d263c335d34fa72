#include "pipeline/sdxl_prompt_encoding.h"

#include <cstring>

#include "core/error.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/sdxl_prompt_chunks.h"

namespace octodiff {

SdxlTokenizedPrompts tokenize_sdxl_prompts(const ClipTokenizer& tokenizer_1, const ClipTokenizer& tokenizer_2,
                                           const std::vector<std::string>& prompts,
                                           const std::vector<std::string>& negative_prompts,
                                           bool zero_empty_negative, const SdxlPromptOptions& options) {
  if (tokenizer_1.max_length() != tokenizer_2.max_length())
    fail("the SDXL tokenizers disagree on the prompt length: ", tokenizer_1.max_length(), " (tokenizer/) and ",
         tokenizer_2.max_length(), " (tokenizer_2/)");
  const PromptOptions options_1{options.syntax, options.long_prompts, options.comma_backtrack, options.embeddings_1};
  const PromptOptions options_2{options.syntax, options.long_prompts, options.comma_backtrack, options.embeddings_2};
  TokenizedPrompts first = tokenize_prompts(tokenizer_1, prompts, negative_prompts, options_1);
  TokenizedPrompts second = tokenize_prompts(tokenizer_2, prompts, negative_prompts, options_2);  // same warnings
  if (first.uses_layouts())
    return sdxl_layouts(std::move(first), std::move(second), negative_prompts, zero_empty_negative);
  SdxlTokenizedPrompts t;
  t.cond_1 = std::move(first.cond);
  t.uncond_1 = std::move(first.uncond);
  t.cond_2 = std::move(second.cond);
  t.uncond_2 = std::move(second.uncond);
  t.length = first.length;
  t.warnings = std::move(first.warnings);
  for (const std::string& negative : negative_prompts) t.zero_uncond.push_back(zero_empty_negative && negative.empty());
  return t;
}

std::array<float, 6> sdxl_time_ids(const SdxlSizeConditioning& size, int height, int width) {
  for (int v : {size.original_height, size.original_width, size.crop_top, size.crop_left, size.target_height,
                size.target_width})
    if (v < 0) fail("SDXL size conditioning: sizes and crop coordinates must not be negative, got ", v);
  auto or_default = [](int v, int fallback) { return static_cast<float>(v ? v : fallback); };
  return {or_default(size.original_height, height), or_default(size.original_width, width),
          static_cast<float>(size.crop_top),        static_cast<float>(size.crop_left),
          or_default(size.target_height, height),   or_default(size.target_width, width)};
}

namespace {

// Row r of `rows` × L × w written into columns [offset, offset + w) of row `to` of `dst` (… × L × W).
void put_columns(const Tensor& src, int64_t r, Tensor& dst, int64_t to, int64_t offset) {
  const int64_t L = src.dim(1), w = src.dim(2), W = dst.dim(2);
  for (int64_t t = 0; t < L; ++t)
    std::memcpy(dst.data() + (to * L + t) * W + offset, src.data() + (r * L + t) * w, sizeof(float) * w);
}

}  // namespace

SdxlConditioning encode_sdxl_device_prompts(const ClipTextModel& encoder_1, const ClipTextModelWithProjection& encoder_2,
                                            const SdxlTokenizedPrompts& tokens, int d, int B, bool guidance,
                                            const std::array<float, 6>& time_ids) {
  if (tokens.uses_layouts()) return encode_sdxl_device_layouts(encoder_1, encoder_2, tokens, d, B, guidance, time_ids);
  // The rows of the UNet's batch ([uncond; cond] or cond) and which of them run the encoders.
  struct Row {
    const std::vector<int32_t>* ids_1 = nullptr;  // null: a zero row
    const std::vector<int32_t>* ids_2 = nullptr;
  };
  std::vector<Row> rows;
  if (guidance)
    for (int b = 0; b < B; ++b) {
      const int i = d * B + b;
      rows.push_back(tokens.zero_uncond[i] ? Row{} : Row{&tokens.uncond_1[i], &tokens.uncond_2[i]});
    }
  for (int b = 0; b < B; ++b) rows.push_back({&tokens.cond_1[d * B + b], &tokens.cond_2[d * B + b]});

  std::vector<int32_t> ids_1, ids_2;
  std::vector<int64_t> encoded;  // the rows that run the encoders, in order
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].ids_1) continue;
    ids_1.insert(ids_1.end(), rows[r].ids_1->begin(), rows[r].ids_1->end());
    ids_2.insert(ids_2.end(), rows[r].ids_2->begin(), rows[r].ids_2->end());
    encoded.push_back(static_cast<int64_t>(r));
  }
  const int64_t n = static_cast<int64_t>(encoded.size()), L = tokens.length;
  const Tensor hidden_1 = encoder_1.forward(ids_1, n, L).penultimate;
  const ClipTextProjectionOutput out_2 = encoder_2.forward(ids_2, n, L);
  const int64_t H1 = hidden_1.dim(2), H2 = out_2.penultimate.dim(2), P = out_2.text_embeds.dim(1);

  const int64_t N = static_cast<int64_t>(rows.size());
  SdxlConditioning c;
  c.context = Tensor::zeros({N, L, H1 + H2});
  c.text_time.text_embeds = Tensor::zeros({N, P});
  c.text_time.time_ids = Tensor::empty({N, 6});
  for (int64_t k = 0; k < n; ++k) {
    put_columns(hidden_1, k, c.context, encoded[k], 0);
    put_columns(out_2.penultimate, k, c.context, encoded[k], H1);
    std::memcpy(c.text_time.text_embeds.data() + encoded[k] * P, out_2.text_embeds.data() + k * P, sizeof(float) * P);
  }
  for (int64_t r = 0; r < N; ++r) std::memcpy(c.text_time.time_ids.data() + r * 6, time_ids.data(), sizeof(float) * 6);
  return c;
}

}  // namespace octodiff
