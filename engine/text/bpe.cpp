#include "text/bpe.h"

#include <limits>

#include "core/error.h"
#include "text/unicode.h"

namespace octodiff::text {

namespace {

// Python's str.split() / str.strip() whitespace, restricted to what can appear in a file we
// already know is valid UTF-8.
bool is_space(char32_t c) {
  return is_python_space(c);
}

std::vector<std::u32string_view> split_whitespace(std::u32string_view line) {
  std::vector<std::u32string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

}  // namespace

BpeMerges BpeMerges::parse(std::string_view bytes, const std::filesystem::path& path, size_t max_merges) {
  const std::string what = path.string();
  const std::u32string text = decode_utf8(bytes, "'" + what + "'");
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  const std::u32string_view content = std::u32string_view(text).substr(begin, end - begin);
  if (content.empty()) fail("'", what, "' is empty: expected a '#version' line and merge rules");

  BpeMerges merges;
  size_t line_no = 0, pos = 0;
  while (pos <= content.size() && merges.rule_count_ < max_merges) {
    size_t newline = content.find(U'\n', pos);
    if (newline == std::u32string_view::npos) newline = content.size();
    const std::u32string_view line = content.substr(pos, newline - pos);
    pos = newline + 1;
    if (++line_no == 1) continue;  // the header, whatever it says
    const auto fields = split_whitespace(line);
    if (fields.size() != 2) {
      fail("'", what, "' line ", line_no, " is not a merge rule (expected two symbols separated by a ",
           "space, got ", fields.size(), " fields)");
    }
    const int rank = static_cast<int>(merges.rule_count_++);
    merges.ranks_[encode_utf8(fields[0]) + ' ' + encode_utf8(fields[1])] = rank;
  }
  if (merges.rule_count_ == 0) fail("'", what, "' has no merge rules after its header line");
  return merges;
}

int BpeMerges::rank(const std::string& first, const std::string& second) const {
  std::string key;
  key.reserve(first.size() + second.size() + 1);
  key.append(first).append(1, ' ').append(second);
  const auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<std::string> BpeMerges::apply(std::vector<std::string> word) const {
  if (word.empty()) return word;
  word.back() += "</w>";
  while (word.size() > 1) {
    int best = std::numeric_limits<int>::max();
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const int r = rank(word[i], word[i + 1]);
      if (r >= 0 && r < best) best = r, best_at = i;
    }
    if (best == std::numeric_limits<int>::max()) break;
    const std::string first = word[best_at], second = word[best_at + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        i += 1;
      }
    }
    word = std::move(merged);
  }
  return word;
}

}  // namespace octodiff::text
