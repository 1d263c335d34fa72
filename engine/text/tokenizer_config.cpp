#include "text/tokenizer_config.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "io/files.h"

namespace octodiff::text {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kDefaultMaxLength = 77;
constexpr int64_t kUnsetMaxLength = 65536;  // larger values are transformers' "no limit" sentinel

json read_json(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("'", path.string(), "' is not valid JSON: ", e.what());
  }
}

std::string read_required(const fs::path& dir, const char* name) {
  const fs::path path = dir / name;
  if (!fs::is_regular_file(path)) fail("tokenizer folder '", dir.string(), "' has no ", name);
  return read_text_file(path);
}

// A token entry: a plain string, or an AddedToken object {"content": ..., "lstrip": ...}.
// Returns nullopt for JSON null (the token is switched off).
std::optional<AddedTokenSpec> parse_token(const json& value, const fs::path& file, const std::string& key) {
  if (value.is_null()) return std::nullopt;
  AddedTokenSpec t;
  if (value.is_string()) {
    t.content = value.get<std::string>();
    return t;
  }
  if (!value.is_object() || !value.contains("content") || !value["content"].is_string()) {
    fail("'", file.string(), "': '", key, "' must be a string or an object with a string 'content'");
  }
  t.content = value["content"].get<std::string>();
  auto flag = [&](const char* name) {
    if (!value.contains(name)) return false;
    if (!value[name].is_boolean())
      fail("'", file.string(), "': '", key, ".", name, "' must be true or false");
    return value[name].get<bool>();
  };
  t.lstrip = flag("lstrip");
  t.rstrip = flag("rstrip");
  if (flag("single_word")) {
    fail("'", file.string(), "': '", key, "' uses single_word, which this tokenizer does not support");
  }
  return t;
}

const char* const kRoles[] = {"bos_token", "eos_token", "unk_token", "pad_token"};

struct ConfigState {
  std::map<std::string, std::optional<AddedTokenSpec>> roles;
  std::map<std::string, fs::path> role_source;             // which file set each role (for messages)
  std::vector<std::pair<AddedTokenSpec, fs::path>> extra;  // additional/added tokens
  std::map<std::string, int32_t> explicit_ids;             // from added_tokens_decoder / added_tokens.json
};

void read_roles(const json& config, const fs::path& file, ConfigState& state) {
  if (!config.is_object()) fail("'", file.string(), "' must contain a JSON object");
  for (const char* role : kRoles) {
    if (!config.contains(role)) continue;
    state.roles[role] = parse_token(config[role], file, role);
    state.role_source[role] = file;
  }
  if (config.contains("additional_special_tokens")) {
    const json& list = config["additional_special_tokens"];
    if (!list.is_array()) fail("'", file.string(), "': 'additional_special_tokens' must be a list");
    for (const json& item : list) {
      if (auto t = parse_token(item, file, "additional_special_tokens")) state.extra.emplace_back(*t, file);
    }
  }
}

int read_max_length(const json& config, const fs::path& file) {
  if (!config.contains("model_max_length")) return kDefaultMaxLength;
  const json& v = config["model_max_length"];
  if (!v.is_number()) fail("'", file.string(), "': 'model_max_length' must be a number");
  const double value = v.get<double>();
  if (value > static_cast<double>(kUnsetMaxLength)) return kDefaultMaxLength;
  if (!v.is_number_integer() || value < 3) {
    fail("'", file.string(), "': 'model_max_length' must be an integer of at least 3, got ", v.dump());
  }
  return static_cast<int>(v.get<int64_t>());
}

std::unordered_map<std::string, int32_t> parse_vocab(const fs::path& path, const std::string& text) {
  json vocab;
  try {
    vocab = json::parse(text);
  } catch (const json::exception& e) {
    fail("'", path.string(), "' is not valid JSON: ", e.what());
  }
  if (!vocab.is_object() || vocab.empty()) {
    fail("'", path.string(), "' must be a non-empty JSON object mapping tokens to ids");
  }
  std::unordered_map<std::string, int32_t> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail("'", path.string(), "': token '", token, "' has id ", id.dump(), ", expected an integer >= 0");
    }
    out[token] = static_cast<int32_t>(id.get<int64_t>());
  }
  return out;
}

// tokenizer_config.json's added_tokens_decoder: {"<id>": token, ...}, each token an extra one
// with that explicit id.
void read_added_tokens_decoder(const json& decoder, const fs::path& config_path, ConfigState& state) {
  if (!decoder.is_object()) fail("'", config_path.string(), "': 'added_tokens_decoder' must be an object");
  for (const auto& [key, value] : decoder.items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      fail("'", config_path.string(), "': added_tokens_decoder key '", key, "' is not a token id");
    }
    auto t = parse_token(value, config_path, "added_tokens_decoder." + key);
    if (!t) continue;
    state.explicit_ids[t->content] = static_cast<int32_t>(id);
    state.extra.emplace_back(*t, config_path);
  }
}

// added_tokens.json: {"token": id, ...}, each an extra token with that explicit id.
void read_added_tokens_json(const fs::path& added_path, ConfigState& state) {
  const json added = read_json(added_path);
  if (!added.is_object()) fail("'", added_path.string(), "' must map tokens to ids");
  for (const auto& [token, id] : added.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      fail("'", added_path.string(), "': token '", token, "' needs a non-negative integer id");
    }
    state.explicit_ids[token] = static_cast<int32_t>(id.get<int64_t>());
    state.extra.emplace_back(AddedTokenSpec{token}, added_path);
  }
}

// The roles and extra tokens the files of `dir` set, over CLIPTokenizer's constructor defaults;
// tokenizer_config.json's model_max_length goes to *max_length.
ConfigState read_token_files(const fs::path& dir, int* max_length) {
  ConfigState state;
  state.roles["bos_token"] = AddedTokenSpec{"<|startoftext|>"};
  for (const char* role : {"eos_token", "unk_token", "pad_token"}) {
    state.roles[role] = AddedTokenSpec{"<|endoftext|>"};
  }
  const fs::path config_path = dir / "tokenizer_config.json";
  bool has_added_tokens_decoder = false;
  if (fs::exists(config_path)) {
    const json config = read_json(config_path);
    read_roles(config, config_path, state);
    *max_length = read_max_length(config, config_path);
    if (config.contains("added_tokens_decoder")) {
      has_added_tokens_decoder = true;
      read_added_tokens_decoder(config["added_tokens_decoder"], config_path, state);
    }
  }
  const fs::path map_path = dir / "special_tokens_map.json";
  if (fs::exists(map_path) && !has_added_tokens_decoder) read_roles(read_json(map_path), map_path, state);
  const fs::path added_path = dir / "added_tokens.json";
  if (fs::exists(added_path)) read_added_tokens_json(added_path, state);
  return state;
}

// The four roles and the extra tokens with their ids (an explicit id first, else the vocabulary's)
// into files.bos/eos/unk/pad and files.added_tokens.
void resolve_token_ids(const ConfigState& state, const fs::path& vocab_path, TokenizerFiles& files) {
  auto resolve = [&](AddedTokenSpec t, const fs::path& source, const std::string& what) {
    if (auto it = state.explicit_ids.find(t.content); it != state.explicit_ids.end()) {
      t.id = it->second;
    } else if (auto v = files.vocab.find(t.content); v != files.vocab.end()) {
      t.id = v->second;
    } else {
      fail("'", source.string(), "' names ", what, " \"", t.content, "\", which is not in '",
           vocab_path.string(), "'");
    }
    return t;
  };
  AddedTokenSpec* targets[] = {&files.bos, &files.eos, &files.unk, &files.pad};
  for (size_t k = 0; k < 4; ++k) {
    const std::string role = kRoles[k];
    const auto source_it = state.role_source.find(role);
    const fs::path source = source_it != state.role_source.end() ? source_it->second : vocab_path;
    const std::optional<AddedTokenSpec>& spec = state.roles.at(role);
    if (!spec) fail("'", source.string(), "' sets no ", role, " (null), which CLIP needs");
    *targets[k] = resolve(*spec, source, role);
    files.added_tokens.push_back(*targets[k]);
  }
  for (const auto& [token, source] : state.extra) {
    files.added_tokens.push_back(resolve(token, source, "the added token"));
  }
}

}  // namespace

TokenizerFiles load_tokenizer_files(const fs::path& dir) {
  TokenizerFiles files;
  const fs::path vocab_path = dir / "vocab.json";
  files.vocab = parse_vocab(vocab_path, read_required(dir, "vocab.json"));
  files.merges_text = read_required(dir, "merges.txt");
  const ConfigState state = read_token_files(dir, &files.max_length);
  resolve_token_ids(state, vocab_path, files);
  return files;
}

}  // namespace octodiff::text
