// CLIP's pre-tokeniser and byte-level mapping (internal to engine/text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace octodiff::text {

// Splits cleaned, lower-cased text into pieces exactly as `regex.findall` does with CLIP's
// pattern (regex module, IGNORECASE):
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// Characters no alternative matches (White_Space, and U+0345, which IGNORECASE makes neither a
// letter nor a non-letter) are dropped. Returned views point into `text`.
std::vector<std::u32string_view> split_pieces(std::u32string_view text);

// GPT-2's byte -> character table: printable Latin-1 bytes map to themselves, the other 68
// bytes (0x00-0x20, 0x7F-0xA0, 0xAD) to U+0100, U+0101, ... in byte order.
char32_t byte_char(unsigned char byte);

// The piece's UTF-8 bytes as byte characters, one UTF-8-encoded symbol per byte.
std::vector<std::string> byte_symbols(std::u32string_view piece);

}  // namespace octodiff::text
