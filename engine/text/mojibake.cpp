// Conservative repair of UTF-8 text that was decoded as Windows-1252 / Latin-1 ("cafÃ©").
//
// ftfy decides with a large "badness" heuristic and tries ten code pages; we handle only
// Windows-1252/Latin-1 and use a much smaller rule, chosen so that it never fires on ordinary
// text and, for the mojibake it recognises, agrees with ftfy:
//  1. Map characters back to the bytes they would have come from (sloppy Windows-1252, which
//     covers Latin-1 too). A *group* is a lead byte followed by the continuation bytes
//     (0x80-0xBF) it needs, forming one valid UTF-8 scalar: C2-DF +1, E0-EF +2, F0-F4 +3.
//  2. A *run* is a maximal sequence of adjacent groups. It is left alone when the character
//     before it is itself a continuation character (other than typographic punctuation): then
//     it is part of a larger garble that re-decoding a piece of would make worse.
//  3. A run is re-decoded when it holds an unmistakable group —
//       - "Â"/"Ã" (C2/C3, Latin-1 letters and symbols) + any continuation except "…" "’" "Œ"
//         "Ž" "¥" (which can follow a capital letter in real text);
//       - "â€" "â†" "â˜" "âœ" (E2 80/86/98/9C: punctuation, arrows, symbols, dingbats);
//       - "ðŸ" (F0 9F: emoji);
//     or it has two or more groups and at least one continuation that is not typographic
//     punctuation (so "ÉTÉ\u00A0Ö’" stays, "Ð°Ð±" becomes "аб", "æ—¥æœ¬" becomes "日本").
// Each unmistakable group above is one that ftfy's heuristic also flags on its own. Ordinary
// accented text never forms a group (an accented letter is followed by a letter or a space,
// not by a continuation symbol), so "café crème brûlée" is untouched.
#include <array>

#include "text/text_cleanup.h"

namespace octodiff::text {

namespace {

// Windows-1252 bytes 0x80-0x9F; zero marks the five undefined ones (sloppy: same-valued C1).
constexpr std::array<char32_t, 32> kCp1252High = {
    0x20AC, 0,      0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,  // 80-87
    0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0,      0x017D, 0,       // 88-8F
    0,      0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,  // 90-97
    0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0,      0x017E, 0x0178,  // 98-9F
};

bool is_continuation(int b) {
  return b >= 0x80 && b <= 0xBF;
}

// Length in characters of the UTF-8 group starting at `i`, or 0 if none starts there.
size_t group_length(const std::u32string_view text, size_t i) {
  const int b0 = sloppy_cp1252_byte(text[i]);
  size_t extra = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    extra = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    extra = 2;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    extra = 3;
  } else {
    return 0;
  }
  if (i + extra >= text.size()) return 0;
  for (size_t k = 1; k <= extra; ++k) {
    if (!is_continuation(sloppy_cp1252_byte(text[i + k]))) return 0;
  }
  // Reject what strict UTF-8 rejects: overlong forms, surrogates, > U+10FFFF.
  const int b1 = sloppy_cp1252_byte(text[i + 1]);
  if (b0 == 0xE0 && b1 < 0xA0) return 0;
  if (b0 == 0xED && b1 > 0x9F) return 0;
  if (b0 == 0xF0 && b1 < 0x90) return 0;
  if (b0 == 0xF4 && b1 > 0x8F) return 0;
  return extra + 1;
}

char32_t decode_group(const std::u32string_view text, size_t i, size_t len) {
  const int b0 = sloppy_cp1252_byte(text[i]);
  char32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (sloppy_cp1252_byte(text[i + k]) & 0x3F);
  return cp;
}

// Continuation characters that ordinarily follow letters in real text.
bool is_typographic(char32_t c) {
  switch (c) {
    case 0x00A0:
    case 0x00AD:
    case 0x00B7:
    case 0x00AB:
    case 0x00BB:
    case 0x2026:
    case 0x2018:
    case 0x2019:
    case 0x201A:
    case 0x201C:
    case 0x201D:
    case 0x201E:
    case 0x2022:
    case 0x2013:
    case 0x2014:
    case 0x2039:
    case 0x203A:
      return true;
    default:
      return false;
  }
}

bool is_unmistakable_group(const std::u32string_view group) {
  const int b0 = sloppy_cp1252_byte(group[0]), b1 = sloppy_cp1252_byte(group[1]);
  if (b0 == 0xC2 || b0 == 0xC3) {
    const char32_t c = group[1];
    return c != U'\u2026' && c != U'\u2019' && c != U'\u0152' && c != U'\u017D' && c != U'\u00A5';
  }
  if (b0 == 0xE2) return b1 == 0x80 || b1 == 0x86 || b1 == 0x98 || b1 == 0x9C;
  if (b0 == 0xF0) return b1 == 0x9F;
  return false;
}

bool should_redecode(const std::u32string_view run, size_t groups) {
  bool symbolic_continuation = false;
  for (size_t k = 0; k < run.size();) {
    const size_t len = group_length(run, k);
    if (is_unmistakable_group(run.substr(k, len))) return true;
    for (size_t j = k + 1; j < k + len; ++j) symbolic_continuation |= !is_typographic(run[j]);
    k += len;
  }
  return groups >= 2 && symbolic_continuation;
}

bool inside_garble(const std::u32string_view text, size_t run_start) {
  if (run_start == 0) return false;
  const char32_t before = text[run_start - 1];
  return is_continuation(sloppy_cp1252_byte(before)) && !is_typographic(before);
}

}  // namespace

char32_t sloppy_cp1252_char(unsigned byte) {
  if (byte >= 0x80 && byte <= 0x9F && kCp1252High[byte - 0x80] != 0) return kCp1252High[byte - 0x80];
  return byte;
}

int sloppy_cp1252_byte(char32_t c) {
  if (c <= 0xFF) return static_cast<int>(c);  // ASCII, C1 controls and Latin-1 map to themselves
  for (size_t k = 0; k < kCp1252High.size(); ++k) {
    if (kCp1252High[k] == c) return static_cast<int>(0x80 + k);
  }
  return -1;
}

std::u32string fix_mojibake(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    // Collect the run of groups starting here.
    size_t end = i, groups = 0;
    while (end < text.size()) {
      const size_t len = group_length(text, end);
      if (len == 0) break;
      end += len;
      ++groups;
    }
    if (groups == 0) {
      out.push_back(text[i++]);
      continue;
    }
    const std::u32string_view run = text.substr(i, end - i);
    if (!inside_garble(text, i) && should_redecode(run, groups)) {
      for (size_t k = 0; k < run.size();) {
        const size_t len = group_length(run, k);
        out.push_back(decode_group(run, k, len));
        k += len;
      }
    } else {
      out.append(run);
    }
    i = end;
  }
  return out;
}

}  // namespace octodiff::text
