#include "text/clip_tokenizer.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe.h"
#include "text/clip_pretokenizer.h"
#include "text/text_cleanup.h"
#include "text/tokenizer_config.h"
#include "text/unicode.h"

namespace octodiff {

namespace {

// CLIP's merges.txt is read as lines [1, 49152 - 256 - 2 + 1): at most 48 894 rules.
constexpr size_t kMaxMerges = 49152 - 256 - 2;
// The per-piece cache is dropped when it reaches this size (prompts are short; this only
// bounds memory for a long-running process fed arbitrary text).
constexpr size_t kMaxCacheEntries = 1 << 16;

}  // namespace

struct ClipTokenizer::Impl {
  struct SplitToken {
    std::u32string content;
    int32_t id = 0;
    bool lstrip = false, rstrip = false;
  };

  std::unordered_map<std::string, int32_t> token_ids;  // vocab.json, then added tokens on top
  text::BpeMerges merges;
  std::vector<SplitToken> split_tokens;  // longest first
  int32_t bos = 0, eos = 0, unk = 0, pad = 0;
  int max_length = 77;
  size_t vocab_size = 0;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  int32_t id_of(const std::string& token) const {
    const auto it = token_ids.find(token);
    return it == token_ids.end() ? unk : it->second;
  }

  void append_piece_ids(std::u32string_view piece, std::vector<int32_t>& out) const;
  void append_text_ids(std::u32string_view text, Cleanup cleanup, std::vector<int32_t>& out) const;
  std::vector<int32_t> content_ids(std::string_view utf8, Cleanup cleanup) const;
};

void ClipTokenizer::Impl::append_piece_ids(std::u32string_view piece, std::vector<int32_t>& out) const {
  // The reference pre-seeds its BPE cache with these two, so they map to themselves.
  if (piece == U"<|startoftext|>" || piece == U"<|endoftext|>") {
    out.push_back(id_of(text::encode_utf8(piece)));
    return;
  }
  std::vector<std::string> symbols = text::byte_symbols(piece);
  std::string key;
  for (const std::string& s : symbols) key += s;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  for (const std::string& token : merges.apply(std::move(symbols))) ids.push_back(id_of(token));
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kMaxCacheEntries) cache.clear();
  cache.emplace(std::move(key), std::move(ids));
}

void ClipTokenizer::Impl::append_text_ids(std::u32string_view raw, Cleanup cleanup,
                                          std::vector<int32_t>& out) const {
  const std::u32string cleaned = cleanup == Cleanup::Ftfy ? text::ftfy_clean(raw) : text::basic_clean(raw);
  for (std::u32string_view piece : text::split_pieces(cleaned)) append_piece_ids(piece, out);
}

std::vector<int32_t> ClipTokenizer::Impl::content_ids(std::string_view utf8, Cleanup cleanup) const {
  const std::u32string text = text::decode_utf8(utf8, "prompt");

  // Special-token split (leftmost, longest token first), as transformers' trie does.
  struct Part {
    std::u32string_view text;
    const SplitToken* special = nullptr;
  };
  std::vector<Part> parts;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const SplitToken* found = nullptr;
    for (const SplitToken& t : split_tokens) {
      if (text.compare(i, t.content.size(), t.content) == 0) {
        found = &t;
        break;
      }
    }
    if (!found) {
      ++i;
      continue;
    }
    parts.push_back({std::u32string_view(text).substr(start, i - start)});
    parts.push_back({{}, found});
    i += found->content.size();
    start = i;
  }
  parts.push_back({std::u32string_view(text).substr(start)});

  // AddedToken lstrip/rstrip eat the whitespace next to the token.
  for (size_t k = 0; k < parts.size(); ++k) {
    if (!parts[k].special) continue;
    if (parts[k].special->rstrip && k + 1 < parts.size() && !parts[k + 1].special) {
      std::u32string_view& right = parts[k + 1].text;
      while (!right.empty() && text::is_python_space(right.front())) right.remove_prefix(1);
    }
    if (parts[k].special->lstrip && k > 0 && !parts[k - 1].special) {
      std::u32string_view& left = parts[k - 1].text;
      while (!left.empty() && text::is_python_space(left.back())) left.remove_suffix(1);
    }
  }

  std::vector<int32_t> ids;
  for (const Part& part : parts) {
    if (part.special) {
      ids.push_back(part.special->id);
    } else if (!part.text.empty()) {
      append_text_ids(part.text, cleanup, ids);
    }
  }
  return ids;
}

ClipTokenizer ClipTokenizer::from_folder(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) fail("tokenizer folder '", dir.string(), "' does not exist");
  const text::TokenizerFiles files = text::load_tokenizer_files(dir);

  auto impl = std::make_shared<Impl>();
  impl->vocab_size = files.vocab.size();
  impl->token_ids = files.vocab;
  impl->merges = text::BpeMerges::parse(files.merges_text, dir / "merges.txt", kMaxMerges);
  impl->max_length = files.max_length;
  for (const text::AddedTokenSpec& t : files.added_tokens) impl->token_ids[t.content] = t.id;

  impl->bos = files.bos.id;
  impl->eos = files.eos.id;
  impl->unk = files.unk.id;
  impl->pad = files.pad.id;

  for (const text::AddedTokenSpec& t : files.added_tokens) {
    const std::u32string content = text::decode_utf8(t.content, "special token");
    const bool seen = std::any_of(impl->split_tokens.begin(), impl->split_tokens.end(),
                                  [&](const Impl::SplitToken& s) { return s.content == content; });
    if (!seen && !content.empty()) impl->split_tokens.push_back({content, t.id, t.lstrip, t.rstrip});
  }
  std::stable_sort(impl->split_tokens.begin(), impl->split_tokens.end(),
                   [](const Impl::SplitToken& a, const Impl::SplitToken& b) {
                     return a.content.size() > b.content.size();
                   });
  return ClipTokenizer(std::move(impl));
}

ClipTokenizer::Encoding ClipTokenizer::encode(std::string_view utf8, Cleanup cleanup) const {
  const std::vector<int32_t> content = impl_->content_ids(utf8, cleanup);
  const size_t max_content = static_cast<size_t>(impl_->max_length - 2);
  Encoding e;
  e.untruncated_length = static_cast<int>(content.size()) + 2;
  e.truncated = content.size() > max_content;
  e.ids.reserve(impl_->max_length);
  e.ids.push_back(impl_->bos);
  e.ids.insert(e.ids.end(), content.begin(), content.begin() + std::min(content.size(), max_content));
  e.ids.push_back(impl_->eos);
  e.ids.resize(impl_->max_length, impl_->pad);
  return e;
}

std::vector<int32_t> ClipTokenizer::tokenize(std::string_view utf8, Cleanup cleanup) const {
  return impl_->content_ids(utf8, cleanup);
}

int ClipTokenizer::bos_id() const {
  return impl_->bos;
}
int ClipTokenizer::eos_id() const {
  return impl_->eos;
}
int ClipTokenizer::unk_id() const {
  return impl_->unk;
}
int ClipTokenizer::pad_id() const {
  return impl_->pad;
}
int ClipTokenizer::max_length() const {
  return impl_->max_length;
}
size_t ClipTokenizer::vocab_size() const {
  return impl_->vocab_size;
}

}  // namespace octodiff
