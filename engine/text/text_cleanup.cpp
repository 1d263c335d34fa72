// The ftfy subset's driver and small fixers, whitespace_clean, and the BasicTokenizer path.
#include "text/text_cleanup.h"

#include "text/unicode.h"

namespace octodiff::text {

namespace {

using U32 = std::u32string;
using U32View = std::u32string_view;

// ftfy splits the text after each '\n' and also bounds segments to this many characters.
constexpr size_t kMaxSegment = 1000000;
// ftfy repeats its fixers until nothing changes; each pass only shortens or canonicalises the
// text, so a handful of passes always suffices. The cap only guards against surprises.
constexpr int kMaxPasses = 16;

U32 fix_c1_controls(U32View text) {
  U32 out(text);
  for (char32_t& c : out) {
    if (c >= 0x80 && c <= 0x9F) c = sloppy_cp1252_char(static_cast<unsigned>(c));
  }
  return out;
}

// Latin ligatures and legacy digraphs, spelled out (ftfy's table; others, e.g. "æ", stay).
struct Ligature {
  char32_t from;
  const char32_t* to;
};
constexpr Ligature kLigatures[] = {
    {0x0132, U"IJ"},      {0x0133, U"ij"},      {0x0149, U"\u02BCn"}, {0x01F1, U"DZ"},      {0x01F2, U"Dz"},
    {0x01F3, U"dz"},      {0x01C4, U"D\u017D"}, {0x01C5, U"D\u017E"}, {0x01C6, U"d\u017E"}, {0x01C7, U"LJ"},
    {0x01C8, U"Lj"},      {0x01C9, U"lj"},      {0x01CA, U"NJ"},      {0x01CB, U"Nj"},      {0x01CC, U"nj"},
    {0xFB00, U"ff"},      {0xFB01, U"fi"},      {0xFB02, U"fl"},      {0xFB03, U"ffi"},     {0xFB04, U"ffl"},
    {0xFB05, U"\u017Ft"}, {0xFB06, U"st"},
};

U32 fix_latin_ligatures(U32View text) {
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text) {
    const Ligature* hit = nullptr;
    for (const Ligature& l : kLigatures) {
      if (l.from == c) hit = &l;
    }
    if (hit) {
      out += hit->to;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Full-width and half-width forms (U+FF01-U+FFEF) become their NFKC form, as ftfy's width
// map does; U+3000 IDEOGRAPHIC SPACE becomes a space.
U32 fix_character_width(U32View text) {
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0x3000) {
      out.push_back(U' ');
    } else if (c >= 0xFF01 && c <= 0xFFEF) {
      out += nfkc(U32View(&c, 1));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

U32 uncurl_quotes(U32View text) {
  U32 out(text);
  for (char32_t& c : out) {
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = U'\'';
    if (c >= 0x201C && c <= 0x201F) c = U'"';
  }
  return out;
}

U32 fix_line_breaks(U32View text) {
  U32 out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == U'\r' && i + 1 < text.size() && text[i + 1] == U'\n') continue;  // CRLF -> LF
    out.push_back(c == U'\r' || c == 0x2028 || c == 0x2029 || c == 0x85 ? U'\n' : c);
  }
  return out;
}

// ANSI terminal escapes: ESC '[' (digits | ';')* letter.
U32 remove_terminal_escapes(U32View text) {
  U32 out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] == 0x1B && i + 1 < text.size() && text[i + 1] == U'[') {
      size_t j = i + 2;
      while (j < text.size() && (is_decimal_digit(text[j]) || text[j] == U';')) ++j;
      if (j < text.size() && ((text[j] >= 'a' && text[j] <= 'z') || (text[j] >= 'A' && text[j] <= 'Z'))) {
        i = j + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

bool is_unwanted_control(char32_t c) {
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || (c >= 0x206A && c <= 0x206F) ||
         c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
}

U32 remove_control_chars(U32View text) {
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (!is_unwanted_control(c)) out.push_back(c);
  }
  return out;
}

// One segment (a line), fixed until stable, in ftfy's order of fixers.
U32 fix_segment(U32 text, bool unescape) {
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    const U32 before = text;
    if (unescape) text = unescape_html(text);
    text = fix_mojibake(text);
    text = fix_c1_controls(text);
    text = fix_latin_ligatures(text);
    text = fix_character_width(text);
    text = uncurl_quotes(text);
    text = fix_line_breaks(text);
    // (fix_surrogates has nothing to do: our text is strictly decoded, never has surrogates.)
    text = remove_terminal_escapes(text);
    text = remove_control_chars(text);
    text = nfc(text);
    if (text == before) break;
  }
  return text;
}

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

U32 ftfy_fix_text(U32View text) {
  U32 out;
  bool unescape = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t newline = text.find(U'\n', pos);
    size_t end = newline == U32View::npos ? text.size() : newline + 1;
    if (end - pos > kMaxSegment) end = pos + kMaxSegment;
    const U32View segment = text.substr(pos, end - pos);
    // Once a segment contains '<' (the text may be HTML), ftfy stops unescaping for good.
    if (segment.find(U'<') != U32View::npos) unescape = false;
    out += fix_segment(U32(segment), unescape);
    pos = end;
  }
  return out;
}

U32 whitespace_clean(U32View text) {
  U32 out;
  out.reserve(text.size());
  bool pending_space = false;
  for (char32_t c : text) {
    if (is_python_space(c)) {
      pending_space = !out.empty();  // leading whitespace is stripped
      continue;
    }
    if (pending_space) out.push_back(U' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;  // trailing whitespace was never emitted
}

U32 ftfy_clean(U32View text) {
  return to_lower(whitespace_clean(ftfy_fix_text(text)));
}

U32 basic_clean(U32View text) {
  // _clean_text: drop NUL, U+FFFD and \p{C} except \t \n \r; whitespace (those three and Zs)
  // becomes a space. Then spaces around CJK ideographs, then NFC.
  U32 cleaned;
  cleaned.reserve(text.size());
  for (char32_t c : text) {
    const bool whitespace = c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || is_space_separator(c);
    if (c == 0 || c == 0xFFFD || (!whitespace && is_other(c))) continue;
    if (whitespace) {
      cleaned.push_back(U' ');
    } else if (is_cjk_ideograph(c)) {
      cleaned.push_back(U' ');
      cleaned.push_back(c);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(c);
    }
  }
  const U32 normalized = nfc(cleaned);
  // Python's str.split() on whitespace, lower-case each piece, join with single spaces.
  U32 out;
  size_t i = 0;
  while (i < normalized.size()) {
    while (i < normalized.size() && is_python_space(normalized[i])) ++i;
    const size_t start = i;
    while (i < normalized.size() && !is_python_space(normalized[i])) ++i;
    if (i > start) {
      if (!out.empty()) out.push_back(U' ');
      out += to_lower(U32View(normalized).substr(start, i - start));
    }
  }
  return out;
}

}  // namespace octodiff::text
