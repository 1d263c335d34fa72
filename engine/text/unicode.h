// The few Unicode services the CLIP tokenizer needs: strict UTF-8 conversion, and (over ICU)
// normalisation, Python-compatible lower-casing and the character classes the reference's
// regular expressions use. Internal to engine/text.
#pragma once

#include <string>
#include <string_view>

namespace octodiff::text {

// Decodes strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF, no truncated
// sequences). Throws octodiff::Error "<what>: invalid UTF-8 at byte offset N (reason)".
std::u32string decode_utf8(std::string_view bytes, std::string_view what);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view text);

std::u32string nfc(std::u32string_view text);
std::u32string nfkc(std::u32string_view text);

// Python's str.lower(): full Unicode lower-case mapping (SpecialCasing's unconditional rules,
// e.g. U+0130 -> "i\u0307") plus the Final_Sigma context rule; no language-specific rules.
std::u32string to_lower(std::u32string_view text);
std::u32string to_upper(std::u32string_view text);  // Python's str.upper() (full mapping)

// Simple case folding (what the `regex` module's IGNORECASE compares by).
char32_t simple_fold(char32_t c);

bool is_letter(char32_t c);           // \p{L}
bool is_number(char32_t c);           // \p{N}
bool is_decimal_digit(char32_t c);    // \p{Nd} (Python re's \d)
bool is_white_space(char32_t c);      // Unicode White_Space (the `regex` module's \s)
bool is_python_space(char32_t c);     // str.isspace() / `re` \s: bidi WS, B or S, or Zs
bool is_space_separator(char32_t c);  // \p{Zs}
bool is_other(char32_t c);            // \p{C}: Cc, Cf, Cs, Co, Cn

}  // namespace octodiff::text
