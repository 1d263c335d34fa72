// Byte-pair encoding with CLIP's "</w>" end-of-word marker (internal to engine/text).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace octodiff::text {

class BpeMerges {
 public:
  // Parses merges.txt as the slow tokenizer does: strip the whole text, split on '\n', skip
  // line 1 (the "#version" header), keep at most `max_merges` rules (48 894 for CLIP); a rule
  // is two whitespace-separated symbols, ranked by position (a repeated pair takes the later
  // rank, as Python's dict does). Anything else is an octodiff::Error naming `path`.
  static BpeMerges parse(std::string_view text, const std::filesystem::path& path, size_t max_merges);

  size_t size() const { return rule_count_; }

  // BPE of one piece given as byte characters (UTF-8 strings): the last symbol gets "</w>",
  // then the lowest-ranked adjacent pair is merged everywhere (left to right, no overlaps)
  // until no pair has a rank or one symbol is left.
  std::vector<std::string> apply(std::vector<std::string> symbols) const;

 private:
  int rank(const std::string& first, const std::string& second) const;

  std::unordered_map<std::string, int> ranks_;  // key: first + ' ' + second
  size_t rule_count_ = 0;
};

}  // namespace octodiff::text
