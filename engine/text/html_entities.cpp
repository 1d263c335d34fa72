// HTML entity decoding as ftfy's `unescape_html` does it, for a chosen set of named entities.
//
// ftfy replaces every match of `&#?[0-9A-Za-z]{1,24};`:
//  - a known entity name (HTML5 names that end in ';', plus an ALL-CAPS spelling of every
//    all-lowercase name, decoded as the upper-cased character: "&EACUTE;" -> "É");
//  - a numeric reference "&#NNN;" / "&#xHH;" decoded like Python's html.unescape (Windows-1252
//    for 0x80-0x9F, U+FFFD for 0, surrogates and > U+10FFFF, nothing for a few invalid code
//    points), unless the result would contain ';' (then the text is kept);
//  - anything else is left as it is.
// We know ~150 names (below): the Latin-1 set, the markup characters, the Windows-1252
// punctuation and a few common symbols. The other ~2000 HTML5 names are left undecoded.
#include <string>
#include <unordered_map>

#include "text/text_cleanup.h"
#include "text/unicode.h"

namespace octodiff::text {

namespace {

struct NamedEntity {
  const char* name;
  char32_t character;
};

// The HTML 4 Latin-1 entities are U+00A0..U+00FF in order.
// clang-format off
constexpr const char* kLatin1Names[96] = {
    "nbsp",    "iexcl",   "cent",    "pound",   "curren",  "yen",     "brvbar",  "sect",  // U+00A0
    "uml",     "copy",    "ordf",    "laquo",   "not",     "shy",     "reg",     "macr",  // U+00A8
    "deg",     "plusmn",  "sup2",    "sup3",    "acute",   "micro",   "para",    "middot",  // U+00B0
    "cedil",   "sup1",    "ordm",    "raquo",   "frac14",  "frac12",  "frac34",  "iquest",  // U+00B8
    "Agrave",  "Aacute",  "Acirc",   "Atilde",  "Auml",    "Aring",   "AElig",   "Ccedil",  // U+00C0
    "Egrave",  "Eacute",  "Ecirc",   "Euml",    "Igrave",  "Iacute",  "Icirc",   "Iuml",  // U+00C8
    "ETH",     "Ntilde",  "Ograve",  "Oacute",  "Ocirc",   "Otilde",  "Ouml",    "times",  // U+00D0
    "Oslash",  "Ugrave",  "Uacute",  "Ucirc",   "Uuml",    "Yacute",  "THORN",   "szlig",  // U+00D8
    "agrave",  "aacute",  "acirc",   "atilde",  "auml",    "aring",   "aelig",   "ccedil",  // U+00E0
    "egrave",  "eacute",  "ecirc",   "euml",    "igrave",  "iacute",  "icirc",   "iuml",  // U+00E8
    "eth",     "ntilde",  "ograve",  "oacute",  "ocirc",   "otilde",  "ouml",    "divide",  // U+00F0
    "oslash",  "ugrave",  "uacute",  "ucirc",   "uuml",    "yacute",  "thorn",   "yuml",  // U+00F8
};
// clang-format on

constexpr NamedEntity kOtherNames[] = {
    {"quot", 0x22},     {"QUOT", 0x22},     {"amp", 0x26},      {"AMP", 0x26},      {"apos", 0x27},
    {"lt", 0x3C},       {"LT", 0x3C},       {"gt", 0x3E},       {"GT", 0x3E},       {"COPY", 0xA9},
    {"REG", 0xAE},      {"OElig", 0x152},   {"oelig", 0x153},   {"Scaron", 0x160},  {"scaron", 0x161},
    {"Yuml", 0x178},    {"fnof", 0x192},    {"circ", 0x2C6},    {"tilde", 0x2DC},   {"ensp", 0x2002},
    {"emsp", 0x2003},   {"thinsp", 0x2009}, {"zwnj", 0x200C},   {"zwj", 0x200D},    {"lrm", 0x200E},
    {"rlm", 0x200F},    {"ndash", 0x2013},  {"mdash", 0x2014},  {"lsquo", 0x2018},  {"rsquo", 0x2019},
    {"sbquo", 0x201A},  {"ldquo", 0x201C},  {"rdquo", 0x201D},  {"bdquo", 0x201E},  {"dagger", 0x2020},
    {"Dagger", 0x2021}, {"bull", 0x2022},   {"hellip", 0x2026}, {"permil", 0x2030}, {"prime", 0x2032},
    {"Prime", 0x2033},  {"lsaquo", 0x2039}, {"rsaquo", 0x203A}, {"euro", 0x20AC},   {"trade", 0x2122},
    {"larr", 0x2190},   {"uarr", 0x2191},   {"rarr", 0x2192},   {"darr", 0x2193},   {"harr", 0x2194},
    {"minus", 0x2212},  {"infin", 0x221E},  {"ne", 0x2260},     {"le", 0x2264},     {"ge", 0x2265},
    {"hearts", 0x2665},
};

bool all_lowercase_ascii(const std::string& s) {
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

using EntityTable = std::unordered_map<std::string, std::u32string>;

const EntityTable& entity_table() {
  static const EntityTable table = [] {
    EntityTable t;
    auto add = [&t](const std::string& name, char32_t c) {
      t.emplace(name, std::u32string(1, c));
      if (all_lowercase_ascii(name)) {
        std::string upper = name;
        for (char& ch : upper) ch = static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
        // An explicit entry (e.g. "AMP") wins; for the ones we list it is the same character.
        t.emplace(upper, to_upper(std::u32string(1, c)));
      }
    };
    for (int k = 0; k < 96; ++k) add(kLatin1Names[k], static_cast<char32_t>(0xA0 + k));
    for (const NamedEntity& e : kOtherNames) add(e.name, e.character);
    return t;
  }();
  return table;
}

bool is_ascii_alnum(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_hex(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Python's html.unescape for a numeric reference whose digits are all valid.
std::u32string decode_char_ref(std::u32string_view digits, int base) {
  uint64_t num = 0;
  for (char32_t c : digits) {
    const int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    num = num * base + v;
    if (num > 0x10FFFF) num = 0x110000;  // saturate: all larger values decode the same way
  }
  if (num == 0) return U"\uFFFD";
  if (num == 0x0D) return U"\r";
  if (num >= 0x80 && num <= 0x9F) return std::u32string(1, sloppy_cp1252_char(static_cast<unsigned>(num)));
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return U"\uFFFD";
  const bool noncharacter = (num & 0xFFFE) == 0xFFFE || (num >= 0xFDD0 && num <= 0xFDEF);
  if ((num >= 0x01 && num <= 0x08) || num == 0x0B || (num >= 0x0E && num <= 0x1F) || num == 0x7F ||
      noncharacter) {
    return U"";
  }
  return std::u32string(1, static_cast<char32_t>(num));
}

// The replacement for one match "&" + body + ";" (body: 1-24 ASCII alphanumerics, maybe after
// '#'), or the match itself when it is not something we decode.
std::u32string replace_entity(std::u32string_view match) {
  const std::u32string_view body = match.substr(1, match.size() - 2);
  if (body[0] == '#') {
    std::u32string_view digits = body.substr(1);
    int base = 10;
    if (!digits.empty() && (digits[0] == 'x' || digits[0] == 'X')) {
      digits.remove_prefix(1);
      base = 16;
    }
    bool valid = !digits.empty();
    for (char32_t c : digits) valid = valid && (base == 16 ? is_hex(c) : (c >= '0' && c <= '9'));
    if (!valid) return std::u32string(match);
    std::u32string decoded = decode_char_ref(digits, base);
    // ftfy keeps the reference when the decoded text contains ';' (e.g. "&#59;").
    return decoded.find(U';') != std::u32string::npos ? std::u32string(match) : decoded;
  }
  std::string name;
  for (char32_t c : body) name.push_back(static_cast<char>(c));
  const auto it = entity_table().find(name);
  return it != entity_table().end() ? it->second : std::u32string(match);
}

}  // namespace

std::u32string unescape_html(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '&') {
      size_t j = i + 1;
      if (j < text.size() && text[j] == '#') ++j;
      const size_t body_start = j;
      while (j < text.size() && j - body_start < 24 && is_ascii_alnum(text[j])) ++j;
      if (j > body_start && j < text.size() && text[j] == ';') {
        out += replace_entity(text.substr(i, j + 1 - i));
        i = j + 1;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

}  // namespace octodiff::text
