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

SdxlTowerRows sdxl_tower_rows(const std::vector<std::string>& keys, int64_t L, int64_t H1, int64_t H2, int64_t P,
                              const std::function<SdxlTowerRows(const std::vector<size_t>&)>& encode,
                              TextEncodingCache* cache) {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (!cache) {
    std::vector<size_t> all(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) all[i] = i;
    return encode(all);
  }
  // A cached row is one vector: L·H1 of tower 1, L·H2 of tower 2, then P.
  const int64_t a = L * H1, b = L * H2, W = a + b + P;
  const Tensor packed = cache->rows(keys, [&](const std::vector<size_t>& which) {
    const SdxlTowerRows o = encode(which);
    const int64_t m = static_cast<int64_t>(which.size());
    if (o.hidden_1.numel() != m * a || o.hidden_2.numel() != m * b || o.text_embeds.numel() != m * P)
      fail("internal: SDXL text towers returned unexpected shapes");
    Tensor t = Tensor::empty({m, 1, W});
    for (int64_t r = 0; r < m; ++r) {
      float* dst = t.data() + r * W;
      std::memcpy(dst, o.hidden_1.data() + r * a, sizeof(float) * a);
      std::memcpy(dst + a, o.hidden_2.data() + r * b, sizeof(float) * b);
      std::memcpy(dst + a + b, o.text_embeds.data() + r * P, sizeof(float) * P);
    }
    return t;
  });
  SdxlTowerRows out{Tensor::empty({n, L, H1}), Tensor::empty({n, L, H2}), Tensor::empty({n, P})};
  for (int64_t r = 0; r < n; ++r) {
    const float* src = packed.data() + r * W;
    std::memcpy(out.hidden_1.data() + r * a, src, sizeof(float) * a);
    std::memcpy(out.hidden_2.data() + r * b, src + a, sizeof(float) * b);
    std::memcpy(out.text_embeds.data() + r * P, src + a + b, sizeof(float) * P);
  }
  return out;
}

SdxlConditioning encode_sdxl_device_prompts(const ClipTextModel& encoder_1, const ClipTextModelWithProjection& encoder_2,
                                            const SdxlTokenizedPrompts& tokens, int d, int B, bool guidance,
                                            const std::array<float, 6>& time_ids, TextEncodingCache* cache) {
  if (tokens.uses_layouts())
    return encode_sdxl_device_layouts(encoder_1, encoder_2, tokens, d, B, guidance, time_ids, cache);
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

  std::vector<int64_t> encoded;  // the rows that run the encoders, in order
  std::vector<std::string> keys;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].ids_1) continue;
    encoded.push_back(static_cast<int64_t>(r));
    keys.push_back(text_row_key(rows[r].ids_1->data(), rows[r].ids_1->size()) +
                   text_row_key(rows[r].ids_2->data(), rows[r].ids_2->size()));
  }
  const int64_t n = static_cast<int64_t>(encoded.size()), L = tokens.length;
  const int64_t H1 = encoder_1.config().hidden_size, H2 = encoder_2.text_model().config().hidden_size;
  const int64_t P = encoder_2.config().projection_dim;
  const SdxlTowerRows towers = sdxl_tower_rows(
      keys, L, H1, H2, P,
      [&](const std::vector<size_t>& which) {
        std::vector<int32_t> ids_1, ids_2;
        for (size_t k : which) {
          const Row& row = rows[encoded[k]];
          ids_1.insert(ids_1.end(), row.ids_1->begin(), row.ids_1->end());
          ids_2.insert(ids_2.end(), row.ids_2->begin(), row.ids_2->end());
        }
        const int64_t m = static_cast<int64_t>(which.size());
        ClipTextProjectionOutput out_2 = encoder_2.forward(ids_2, m, L);
        return SdxlTowerRows{encoder_1.forward(ids_1, m, L).penultimate, std::move(out_2.penultimate),
                             std::move(out_2.text_embeds)};
      },
      cache);

  const int64_t N = static_cast<int64_t>(rows.size());
  SdxlConditioning c;
  c.context = Tensor::zeros({N, L, H1 + H2});
  c.text_time.text_embeds = Tensor::zeros({N, P});
  c.text_time.time_ids = Tensor::empty({N, 6});
  for (int64_t k = 0; k < n; ++k) {
    put_columns(towers.hidden_1, k, c.context, encoded[k], 0);
    put_columns(towers.hidden_2, k, c.context, encoded[k], H1);
    std::memcpy(c.text_time.text_embeds.data() + encoded[k] * P, towers.text_embeds.data() + k * P, sizeof(float) * P);
  }
  for (int64_t r = 0; r < N; ++r) std::memcpy(c.text_time.time_ids.data() + r * 6, time_ids.data(), sizeof(float) * 6);
  return c;
}

}  // namespace octodiff
