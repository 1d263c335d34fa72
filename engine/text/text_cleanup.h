// Text clean-up that runs before CLIP's pre-tokeniser (internal to engine/text).
//
// Two paths, as in transformers' slow CLIPTokenizer:
//  - ftfy_clean: `whitespace_clean(ftfy.fix_text(text)).lower()`, with our own subset of
//    ftfy 6.3 (see clip_tokenizer.h for exactly what is and is not covered).
//  - basic_clean: the BasicTokenizer fallback used when ftfy is not installed.
// Both take and return code points and never fail on valid text.
#pragma once

#include <string>
#include <string_view>

namespace octodiff::text {

std::u32string ftfy_clean(std::u32string_view text);
std::u32string basic_clean(std::u32string_view text);

// The pieces, exposed for tests and for each other.
std::u32string ftfy_fix_text(std::u32string_view text);     // the ftfy subset, no lower-casing
std::u32string whitespace_clean(std::u32string_view text);  // re.sub(r"\s+", " ").strip()
std::u32string unescape_html(std::u32string_view text);     // ftfy.fixes.unescape_html subset
std::u32string fix_mojibake(std::u32string_view text);      // conservative UTF-8-as-cp1252 repair

// Windows-1252 with ftfy's "sloppy" twist: bytes 0x81 0x8D 0x8F 0x90 0x9D (undefined in
// Windows-1252) map to the C1 controls of the same value, so every byte has a character.
char32_t sloppy_cp1252_char(unsigned byte);
// The inverse: the byte a character would have been decoded from, or -1 if it has none.
int sloppy_cp1252_byte(char32_t c);

}  // namespace octodiff::text
