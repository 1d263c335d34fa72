#include "pipeline/prompt_encoding.h"

#include <algorithm>

#include "core/error.h"

namespace octodiff {
namespace {

[[noreturn]] void relabel(const Error& e, const char* what, int i) {
  std::string msg = e.what();
  if (msg.rfind("prompt: ", 0) == 0) msg = msg.substr(8);  // the tokenizer's own label
  fail(what, " ", i + 1, ": ", msg);
}

ClipTokenizer::Encoding encode_labelled(const ClipTokenizer& tok, const std::string& text, const char* what, int i) {
  try {
    return tok.encode(text);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    relabel(e, what, i);
  }
}

PromptLayout layout_labelled(const ClipTokenizer& tok, const std::string& text, const PromptLayoutOptions& options,
                             const char* what, int i) {
  try {
    return layout_prompt(tok, text, options);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    relabel(e, what, i);
  }
}

TokenizedPrompts tokenize_plain(const ClipTokenizer& tok, const std::vector<std::string>& prompts,
                                const std::vector<std::string>& negative_prompts) {
  TokenizedPrompts t;
  const int n = static_cast<int>(prompts.size());
  t.cond.resize(n);
  t.uncond.resize(n);
  t.length = tok.max_length();
  for (int i = 0; i < n; ++i) {
    auto enc = encode_labelled(tok, prompts[i], "prompt", i);
    if (enc.truncated)
      t.warnings.push_back(cat("prompt ", i + 1, " has ", enc.untruncated_length, " tokens; only the first ",
                               tok.max_length(), " (", tok.max_length() - 2, " words and symbols) are used"));
    t.cond[i] = std::move(enc.ids);
    auto neg = encode_labelled(tok, negative_prompts[i], "negative prompt", i);
    if (neg.truncated && (i == 0 || negative_prompts[i] != negative_prompts[i - 1]))
      t.warnings.push_back(cat("negative prompt ", i + 1, " has ", neg.untruncated_length,
                               " tokens and was truncated to ", tok.max_length()));
    t.uncond[i] = std::move(neg.ids);
  }
  return t;
}

// Truncate: keep the first chunk, with a warning when there were more.
void truncate_layout(PromptLayout& layout, const std::string& what, std::vector<std::string>& warnings) {
  if (layout.chunks.size() <= 1) return;
  warnings.push_back(cat(what, " has ", layout.chunks.size(), " chunks of ", kChunkTokens, " tokens (",
                         layout.token_count, " tokens); only the first ", kChunkTokens + 2, " (", kChunkTokens,
                         " words and symbols) are used"));
  layout.chunks.resize(1);
}

void note_used(const PromptLayout& layout, std::vector<std::string>& used) {
  for (const auto& name : layout.embeddings_used)
    if (std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
}

TokenizedPrompts tokenize_layouts(const ClipTokenizer& tok, const std::vector<std::string>& prompts,
                                  const std::vector<std::string>& negative_prompts, const PromptOptions& options) {
  TokenizedPrompts t;
  const PromptLayoutOptions layout_options{options.syntax, options.comma_backtrack, options.embeddings};
  const bool truncate = options.long_prompts == LongPrompts::Truncate;
  const int n = static_cast<int>(prompts.size());
  for (int i = 0; i < n; ++i) {
    PromptLayout cond = layout_labelled(tok, prompts[i], layout_options, "prompt", i);
    if (truncate) truncate_layout(cond, cat("prompt ", i + 1), t.warnings);
    PromptLayout uncond = layout_labelled(tok, negative_prompts[i], layout_options, "negative prompt", i);
    if (truncate && (i == 0 || negative_prompts[i] != negative_prompts[i - 1]))
      truncate_layout(uncond, cat("negative prompt ", i + 1), t.warnings);
    if (truncate) uncond.chunks.resize(1);
    note_used(cond, t.embeddings_used);
    note_used(uncond, t.embeddings_used);
    t.cond_layouts.push_back(std::move(cond));
    t.uncond_layouts.push_back(std::move(uncond));
  }
  t.empty = layout_prompt(tok, "", {});
  t.length = kChunkTokens + 2;
  return t;
}

}  // namespace

int clip_skip_layers(int clip_skip, const ClipTextConfig& encoder) {
  if (clip_skip < 1 || clip_skip > encoder.num_hidden_layers)
    fail("clip skip ", clip_skip, " is outside 1..", encoder.num_hidden_layers,
         " (1: the text encoder's last layer, 2: the one before it; this encoder has ",
         encoder.num_hidden_layers, " layers)");
  return clip_skip - 1;
}

TokenizedPrompts tokenize_prompts(const ClipTokenizer& tok, const std::vector<std::string>& prompts,
                                  const std::vector<std::string>& negative_prompts, const PromptOptions& options) {
  const bool plain = options.syntax == PromptSyntax::Plain && options.long_prompts == LongPrompts::Truncate &&
                     options.embeddings == nullptr;
  TokenizedPrompts t = plain ? tokenize_plain(tok, prompts, negative_prompts)
                             : tokenize_layouts(tok, prompts, negative_prompts, options);
  t.skipped_layers = options.skipped_layers;
  return t;
}

Tensor encode_device_prompts(const ClipTextModel& encoder, const TokenizedPrompts& tokens, int d, int B,
                             bool guidance, TextEncodingCache* cache) {
  if (tokens.uses_layouts()) {
    std::vector<const PromptLayout*> layouts;
    if (guidance)
      for (int b = 0; b < B; ++b) layouts.push_back(&tokens.uncond_layouts[d * B + b]);
    for (int b = 0; b < B; ++b) layouts.push_back(&tokens.cond_layouts[d * B + b]);
    return encode_prompt_layouts(encoder, layouts, tokens.empty, cache, tokens.skipped_layers);
  }
  std::vector<const std::vector<int32_t>*> rows;  // [uncond;] cond
  if (guidance)
    for (int b = 0; b < B; ++b) rows.push_back(&tokens.uncond[d * B + b]);
  for (int b = 0; b < B; ++b) rows.push_back(&tokens.cond[d * B + b]);
  auto encode = [&](const std::vector<size_t>& which) {
    std::vector<int32_t> ids;
    for (size_t i : which) ids.insert(ids.end(), rows[i]->begin(), rows[i]->end());
    return encoder.forward(ids, static_cast<int64_t>(which.size()), tokens.length, tokens.skipped_layers)
        .last_hidden_state;
  };
  std::vector<size_t> all(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) all[i] = i;
  if (!cache) return encode(all);
  std::vector<std::string> keys;
  for (const auto* ids : rows)
    keys.push_back(text_row_key(ids->data(), ids->size(), {}, tokens.skipped_layers));
  return cache->rows(keys, encode);
}

}  // namespace octodiff
