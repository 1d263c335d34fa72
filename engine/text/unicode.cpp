#include "text/unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <vector>

#include "core/error.h"

namespace octodiff::text {

std::u32string decode_utf8(std::string_view bytes, std::string_view what) {
  std::u32string out;
  out.reserve(bytes.size());
  const size_t n = bytes.size();
  auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  auto bad = [&](size_t at, const char* reason) {
    fail(what, ": invalid UTF-8 at byte offset ", at, " (", reason, ")");
  };
  for (size_t i = 0; i < n;) {
    const unsigned b0 = byte(i);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    int extra = 0;
    char32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      extra = 1, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      extra = 2, cp = b0 & 0x0F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      extra = 3, cp = b0 & 0x07;
    } else if (b0 >= 0x80 && b0 <= 0xBF) {
      bad(i, "continuation byte without a lead byte");
    } else {
      bad(i, b0 == 0xC0 || b0 == 0xC1 ? "overlong encoding" : "byte that never appears in UTF-8");
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= n) bad(i, "sequence truncated by the end of the text");
      const unsigned b = byte(i + k);
      if ((b & 0xC0) != 0x80) bad(i, "sequence truncated: expected a continuation byte");
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000)) bad(i, "overlong encoding");
    if (cp >= 0xD800 && cp <= 0xDFFF) bad(i, "encoded UTF-16 surrogate code point");
    if (cp > 0x10FFFF) bad(i, "code point above U+10FFFF");
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

namespace {

// ICU works on UTF-16; our text is always valid (decoded strictly), so no error paths here.
std::vector<UChar> to_utf16(std::u32string_view text) {
  std::vector<UChar> out;
  out.reserve(text.size() + 1);
  for (char32_t c : text) {
    if (c < 0x10000) {
      out.push_back(static_cast<UChar>(c));
    } else {
      out.push_back(U16_LEAD(c));
      out.push_back(U16_TRAIL(c));
    }
  }
  return out;
}

std::u32string from_utf16(const UChar* s, int32_t n) {
  std::u32string out;
  out.reserve(n);
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(s, i, n, c);
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

// Runs an ICU "preflight then fill" string function.
template <typename Fn>
std::u32string icu_transform(std::u32string_view text, const char* what, Fn&& fn) {
  const std::vector<UChar> src = to_utf16(text);
  std::vector<UChar> dst(src.size() + 16);
  UErrorCode status = U_ZERO_ERROR;
  int32_t n =
      fn(src.data(), static_cast<int32_t>(src.size()), dst.data(), static_cast<int32_t>(dst.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    dst.resize(n + 1);
    status = U_ZERO_ERROR;
    n = fn(src.data(), static_cast<int32_t>(src.size()), dst.data(), static_cast<int32_t>(dst.size()),
           &status);
  }
  if (U_FAILURE(status)) fail("ICU ", what, " failed: ", u_errorName(status));
  return from_utf16(dst.data(), n);
}

const UNormalizer2* normalizer(bool compat) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* n = compat ? unorm2_getNFKCInstance(&status) : unorm2_getNFCInstance(&status);
  if (U_FAILURE(status)) fail("ICU normaliser unavailable: ", u_errorName(status));
  return n;
}

std::u32string normalize(std::u32string_view text, bool compat) {
  const UNormalizer2* norm = normalizer(compat);
  return icu_transform(text, "normalisation",
                       [&](const UChar* s, int32_t n, UChar* d, int32_t cap, UErrorCode* st) {
                         return unorm2_normalize(norm, s, n, d, cap, st);
                       });
}

}  // namespace

std::u32string nfc(std::u32string_view text) {
  return normalize(text, false);
}
std::u32string nfkc(std::u32string_view text) {
  return normalize(text, true);
}

std::u32string to_lower(std::u32string_view text) {
  // The root locale ("") applies exactly the language-independent rules Python applies.
  return icu_transform(text, "lower-casing",
                       [](const UChar* s, int32_t n, UChar* d, int32_t cap, UErrorCode* st) {
                         return u_strToLower(d, cap, s, n, "", st);
                       });
}

std::u32string to_upper(std::u32string_view text) {
  return icu_transform(text, "upper-casing",
                       [](const UChar* s, int32_t n, UChar* d, int32_t cap, UErrorCode* st) {
                         return u_strToUpper(d, cap, s, n, "", st);
                       });
}

char32_t simple_fold(char32_t c) {
  return static_cast<char32_t>(u_foldCase(c, U_FOLD_CASE_DEFAULT));
}

bool is_letter(char32_t c) {
  return (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0;
}
bool is_number(char32_t c) {
  return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0;
}
bool is_decimal_digit(char32_t c) {
  return u_charType(c) == U_DECIMAL_DIGIT_NUMBER;
}
bool is_white_space(char32_t c) {
  return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE);
}
bool is_space_separator(char32_t c) {
  return u_charType(c) == U_SPACE_SEPARATOR;
}
bool is_other(char32_t c) {
  return (U_GET_GC_MASK(c) & U_GC_C_MASK) != 0;
}

bool is_python_space(char32_t c) {
  // CPython generates its whitespace table from: bidirectional class WS, B or S, or Zs.
  const UCharDirection d = u_charDirection(c);
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR ||
         is_space_separator(c);
}

}  // namespace octodiff::text
