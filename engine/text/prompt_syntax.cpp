#include "text/prompt_syntax.h"

#include <cstdlib>

#include "core/error.h"

namespace octodiff {

PromptSyntax parse_prompt_syntax(const std::string& name) {
  if (name == "plain") return PromptSyntax::Plain;
  if (name == "a1111") return PromptSyntax::A1111;
  fail("unknown prompt syntax '", name, "' (plain, a1111)");
}

std::string prompt_syntax_name(PromptSyntax s) {
  return s == PromptSyntax::A1111 ? "a1111" : "plain";
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
// Python's \w on the ASCII range; every byte of a multi-byte UTF-8 character counts as a letter.
bool is_word(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_special(char c) { return c == '\\' || c == '(' || c == ')' || c == '[' || c == ']' || c == ':'; }

// One match of A1111's re_attention at `pos`: its length, and the weight's text for ":1.3)".
struct Match {
  size_t length = 0;
  std::string_view weight;  // empty unless the match is ":<number>)"
};

Match weight_close_at(std::string_view s, size_t pos) {  // ":\s*([+-]?[.\d]+)\s*\)"
  size_t i = pos + 1;
  while (i < s.size() && is_space(s[i])) ++i;
  const size_t begin = i;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t digits = i;
  while (i < s.size() && (is_digit(s[i]) || s[i] == '.')) ++i;
  if (i == digits) return {1, {}};
  const size_t end = i;
  while (i < s.size() && is_space(s[i])) ++i;
  if (i >= s.size() || s[i] != ')') return {1, {}};
  return {i + 1 - pos, s.substr(begin, end - begin)};
}

Match match_at(std::string_view s, size_t pos) {
  const char c = s[pos];
  if (c == '\\') {
    const bool escape = pos + 1 < s.size() && (s[pos + 1] == '(' || s[pos + 1] == ')' || s[pos + 1] == '[' ||
                                               s[pos + 1] == ']' || s[pos + 1] == '\\');
    return {escape ? 2u : 1u, {}};
  }
  if (c == ':') return weight_close_at(s, pos);
  if (is_special(c)) return {1, {}};
  size_t end = pos;
  while (end < s.size() && !is_special(s[end])) ++end;
  return {end - pos, {}};
}

// Python's float() on "[+-]?[.\d]+".
double parse_weight(std::string_view w) {
  const std::string text(w);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || text.find_first_of("0123456789") == std::string::npos ||
      text.find('.') != text.rfind('.'))
    fail("prompt: '", text, "' in '(…:", text, ")' is not a number");
  return value;
}

// re.split(r"\s*\bBREAK\b\s*", text)
std::vector<std::string> split_breaks(std::string_view s) {
  std::vector<std::string> parts;
  size_t part_begin = 0, search = 0;
  while (true) {
    size_t at = s.find("BREAK", search);
    if (at == std::string_view::npos) break;
    const size_t after = at + 5;
    const bool bounded = (at == 0 || !is_word(s[at - 1])) && (after == s.size() || !is_word(s[after]));
    if (!bounded) {
      search = at + 1;
      continue;
    }
    size_t begin = at;
    while (begin > part_begin && is_space(s[begin - 1])) --begin;
    size_t end = after;
    while (end < s.size() && is_space(s[end])) ++end;
    parts.emplace_back(s.substr(part_begin, begin - part_begin));
    part_begin = search = end;
  }
  parts.emplace_back(s.substr(part_begin));
  return parts;
}

void multiply_from(std::vector<WeightedText>& res, size_t start, double multiplier) {
  for (size_t p = start; p < res.size(); ++p) res[p].weight *= multiplier;
}

void merge_equal_weights(std::vector<WeightedText>& res) {
  size_t i = 0;
  while (i + 1 < res.size()) {
    if (res[i].weight == res[i + 1].weight) {
      res[i].text += res[i + 1].text;
      res.erase(res.begin() + static_cast<std::ptrdiff_t>(i + 1));
    } else {
      ++i;
    }
  }
}

}  // namespace

std::vector<WeightedText> parse_prompt_attention(std::string_view text) {
  constexpr double kRound = 1.1, kSquare = 1 / 1.1;
  std::vector<WeightedText> res;
  std::vector<size_t> round, square;
  for (size_t pos = 0; pos < text.size();) {
    const Match m = match_at(text, pos);
    const std::string_view token = text.substr(pos, m.length);
    pos += m.length;
    if (token[0] == '\\') {
      res.push_back({std::string(token.substr(1)), 1.0});
    } else if (token == "(") {
      round.push_back(res.size());
    } else if (token == "[") {
      square.push_back(res.size());
    } else if (!m.weight.empty() && !round.empty()) {
      multiply_from(res, round.back(), parse_weight(m.weight));
      round.pop_back();
    } else if (token == ")" && !round.empty()) {
      multiply_from(res, round.back(), kRound);
      round.pop_back();
    } else if (token == "]" && !square.empty()) {
      multiply_from(res, square.back(), kSquare);
      square.pop_back();
    } else {
      const std::vector<std::string> parts = split_breaks(token);
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) res.push_back({"BREAK", -1.0});
        res.push_back({parts[i], 1.0});
      }
    }
  }
  for (size_t start : round) multiply_from(res, start, kRound);
  for (size_t start : square) multiply_from(res, start, kSquare);
  if (res.empty()) res.push_back({"", 1.0});
  merge_equal_weights(res);
  return res;
}

std::vector<WeightedText> parse_prompt(std::string_view text, PromptSyntax syntax) {
  if (syntax == PromptSyntax::Plain) return {{std::string(text), 1.0}};
  return parse_prompt_attention(text);
}

}  // namespace octodiff
