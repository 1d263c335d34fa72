#include "text/clip_pretokenizer.h"

#include <array>

#include "text/unicode.h"

namespace octodiff::text {

namespace {

// U+0345 COMBINING GREEK YPOGEGRAMMENI (Mn) case-folds to a Greek letter, so under IGNORECASE
// the regex module excludes it from [^\s\p{L}\p{N}] without admitting it to [\p{L}].
constexpr char32_t kYpogegrammeni = 0x0345;

bool is_symbol(char32_t c) {
  return !is_white_space(c) && !is_letter(c) && !is_number(c) && c != kYpogegrammeni;
}

// Case-insensitive (simple folding) match of an ASCII literal at text[i...].
bool matches_at(std::u32string_view text, size_t i, std::string_view literal) {
  if (text.size() - i < literal.size()) return false;
  for (size_t k = 0; k < literal.size(); ++k) {
    if (simple_fold(text[i + k]) != static_cast<char32_t>(literal[k])) return false;
  }
  return true;
}

// Length of the alternative that matches at text[i], trying them in the pattern's order.
size_t match_length(std::u32string_view text, size_t i) {
  for (std::string_view special : {"<|startoftext|>", "<|endoftext|>"}) {
    if (matches_at(text, i, special)) return special.size();
  }
  if (text[i] == U'\'') {
    for (std::string_view contraction : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}) {
      if (matches_at(text, i, contraction)) return contraction.size();
    }
  }
  size_t j = i;
  if (is_letter(text[i])) {
    while (j < text.size() && is_letter(text[j])) ++j;
    return j - i;
  }
  if (is_number(text[i])) return 1;
  while (j < text.size() && is_symbol(text[j])) ++j;
  return j - i;  // 0 when nothing matches here
}

const std::array<char32_t, 256>& byte_table() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::u32string_view> split_pieces(std::u32string_view text) {
  std::vector<std::u32string_view> pieces;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = match_length(text, i);
    if (n == 0) {
      ++i;
      continue;
    }
    pieces.push_back(text.substr(i, n));
    i += n;
  }
  return pieces;
}

char32_t byte_char(unsigned char byte) {
  return byte_table()[byte];
}

std::vector<std::string> byte_symbols(std::u32string_view piece) {
  const std::string bytes = encode_utf8(piece);
  std::vector<std::string> symbols;
  symbols.reserve(bytes.size());
  for (char b : bytes) {
    std::string symbol;
    append_utf8(symbol, byte_char(static_cast<unsigned char>(b)));
    symbols.push_back(std::move(symbol));
  }
  return symbols;
}

}  // namespace octodiff::text
