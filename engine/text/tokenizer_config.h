// Reading a transformers tokenizer folder (internal to engine/text): vocab.json, merges.txt and
// the optional tokenizer_config.json / special_tokens_map.json / added_tokens.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace octodiff::text {

struct AddedTokenSpec {
  std::string content;
  int32_t id = -1;
  bool lstrip = false, rstrip = false;
};

struct TokenizerFiles {
  std::unordered_map<std::string, int32_t> vocab;  // vocab.json
  std::string merges_text;                         // merges.txt, raw
  // Resolved like transformers: CLIPTokenizer's defaults, then tokenizer_config.json, then
  // special_tokens_map.json (unless tokenizer_config.json carries added_tokens_decoder).
  AddedTokenSpec bos, eos, unk, pad;
  // Every token the special-token split recognises (bos/eos/unk/pad, additional special
  // tokens, added tokens), ids resolved.
  std::vector<AddedTokenSpec> added_tokens;
  // model_max_length; 77 when absent or set to transformers' "unset" sentinel (> 65536).
  int max_length = 77;
};

// Throws octodiff::Error naming the file for anything missing or malformed.
TokenizerFiles load_tokenizer_files(const std::filesystem::path& dir);

}  // namespace octodiff::text
