#include "pipeline/prompt_encoding.h"

#include "core/error.h"

namespace octodiff {
namespace {

ClipTokenizer::Encoding encode_labelled(const ClipTokenizer& tok, const std::string& text, const char* what, int i) {
  try {
    return tok.encode(text);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("prompt: ", 0) == 0) msg = msg.substr(8);  // the tokenizer's own label
    fail(what, " ", i + 1, ": ", msg);
  }
}

}  // namespace

TokenizedPrompts tokenize_prompts(const ClipTokenizer& tok, const std::vector<std::string>& prompts,
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

Tensor encode_device_prompts(const ClipTextModel& encoder, const TokenizedPrompts& tokens, int d, int B,
                             bool guidance) {
  std::vector<int32_t> ids;
  if (guidance)
    for (int b = 0; b < B; ++b) ids.insert(ids.end(), tokens.uncond[d * B + b].begin(), tokens.uncond[d * B + b].end());
  for (int b = 0; b < B; ++b) ids.insert(ids.end(), tokens.cond[d * B + b].begin(), tokens.cond[d * B + b].end());
  const int rows = guidance ? 2 * B : B;
  return encoder.forward(ids, rows, tokens.length).last_hidden_state;
}

}  // namespace octodiff
