// The tokenizer's building blocks: the ftfy subset, whitespace_clean, the no-ftfy cleanup, the
// split scanner, the byte table and BPE. Expected ftfy outputs below are what ftfy 6.3.1's
// fix_text returns for the same input (run by hand with the reference implementation).
#include "text/text_cleanup.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "text/bpe.h"
#include "text/clip_pretokenizer.h"
#include "text/unicode.h"

using namespace octodiff;
using namespace octodiff::text;

namespace {

std::string fix(const std::string& utf8) {
  return encode_utf8(ftfy_fix_text(decode_utf8(utf8, "test")));
}
std::string clean(const std::string& utf8) {
  return encode_utf8(ftfy_clean(decode_utf8(utf8, "test")));
}
std::string basic(const std::string& utf8) {
  return encode_utf8(basic_clean(decode_utf8(utf8, "test")));
}

std::vector<std::string> pieces(const std::string& utf8) {
  const std::u32string text = decode_utf8(utf8, "test");
  std::vector<std::string> out;
  for (auto p : split_pieces(text)) out.push_back(encode_utf8(p));
  return out;
}

}  // namespace

TEST(FtfySubset, MatchesFtfyOnItsOwnExamples) {
  const std::pair<std::string, std::string> cases[] = {
      {"&amp;amp; x", "& x"},  // ftfy repeats until stable, so entities unescape more than once
      {"Broken text&hellip; it&#x2019;s \uFB02ubberi\uFB01c!", "Broken text\u2026 it's flubberific!"},
      {"\uFF2C\uFF2F\uFF35\uFF24\u3000\uFF2E\uFF2F\uFF29\uFF33\uFF25\uFF33", "LOUD NOISES"},
      {"\uFF35\uFF80\uFF70\uFF9D", "U\u30BF\u30FC\u30F3"},  // half-width katakana too
      {"\uFB02u\uFB03e\uFB06", "fluffiest"},
      {"P&EACUTE;REZ", "P\u00C9REZ"},
      {"BUNDESSTRA&SZLIG;E", "BUNDESSTRASSE"},
      {"&ntilde; &Ntilde; &NTILDE; &nTILDE;", "\u00F1 \u00D1 \u00D1 &nTILDE;"},
      {"&#59; &#0; &#x80; &#1; &#xD800; &#12ab; &#x; &#128512;",
       "&#59; \uFFFD \u20AC  \uFFFD &#12ab; &#x; \U0001F600"},
      {"\u201Csmart quotes\u201D and \u2018apostrophes\u2019 \u2014 em dash\u2026",
       "\"smart quotes\" and 'apostrophes' \u2014 em dash\u2026"},
      {"\u0085 a\u0093b", "\u2026 a\"b"},  // C1 controls read as Windows-1252
      {"\x1b[36;44mblue\x1b[0m", "blue"},
      {"a\r\nb\rc\u2028d", "a\nb\nc\nd"},
      {std::string("\uFEFFbom\0nul\x07", 12), "bomnul"},
      {"A\u030A", "\u00C5"},  // NFC
  };
  for (const auto& [input, want] : cases) EXPECT_EQ(fix(input), want) << input;
}

TEST(FtfySubset, UnescapesOnlyUntilALineHasAnAngleBracket) {
  EXPECT_EQ(fix("a &lt;b&gt; <i>x &amp;</i>"), "a &lt;b&gt; <i>x &amp;</i>");
  EXPECT_EQ(fix("line1 &amp;\n<b> &amp;\nx &amp;"), "line1 &\n<b> &amp;\nx &amp;");
}

TEST(FtfySubset, RepairsClearMojibake) {
  const std::pair<std::string, std::string> cases[] = {
      {"caf\u00C3\u00A9 mojibake", "caf\u00E9 mojibake"},  // golden prompt 11
      {"caf\u00C3\u00A9 cr\u00C3\u00A8me", "caf\u00E9 cr\u00E8me"},
      {"doesn\u00E2\u0080\u0099t", "doesn't"},  // then uncurled
      {"doesn\u00E2\u20AC\u2122t", "doesn't"},  // same via Windows-1252
      {"\u00F0\u0178\u0161\u20AC rocket", "\U0001F680 rocket"},
      {"\u00E6\u2014\u00A5\u00E6\u0153\u00AC", "\u65E5\u672C"},
      {"\u00C3\u0085rhus", "\u00C5rhus"},
  };
  for (const auto& [input, want] : cases) EXPECT_EQ(fix(input), want) << input;
}

TEST(FtfySubset, LeavesOrdinaryTextAlone) {
  for (const char* text :
       {"caf\u00E9 cr\u00E8me br\u00FBl\u00E9e", "caf\u00E9 au lait", "na\u00EFve Z\u00FCrich",
        "S\u00E3o Paulo, \u00C6r\u00F8, \u0141\u00F3d\u017A", "\u00C9T\u00C9\u00A0\u00D6",
        "Fu\u00DF 5\u00B0 \u00BD \u00A9 \u00AE \u2122", "\u6771\u4EAC\u306E\u591C\u666F",
        "\u041C\u043E\u0441\u043A\u0432\u0430 \u0391\u03B8\u03AE\u03BD\u03B1"}) {
    EXPECT_EQ(fix(text), text);
  }
  // Only uncurled: ftfy leaves the letters of these alone too.
  EXPECT_EQ(fix("Fu\u00DF\u201C ok"), "Fu\u00DF\" ok");
  EXPECT_EQ(fix("\u00C9T\u00C9\u00A0\u00D6\u2019"), "\u00C9T\u00C9\u00A0\u00D6'");
}

TEST(WhitespaceClean, CollapsesPythonWhitespaceAndLowerCases) {
  EXPECT_EQ(encode_utf8(whitespace_clean(decode_utf8("  a \t\n b\u3000\u2003c\x1c ", "t"))), "a b c");
  EXPECT_EQ(clean("  lots   of\textra \n\n whitespace\t "), "lots of extra whitespace");
  EXPECT_EQ(clean("\u0130STANBUL \u039F\u0394\u039F\u03A3"), "i\u0307stanbul \u03BF\u03B4\u03BF\u03C2");
}

TEST(BasicCleanup, IsTransformersFallback) {
  EXPECT_EQ(basic("\u6771\u4EAC\u306E\u591C\u666F, \u9AD8"), "\u6771 \u4EAC \u306E \u591C \u666F , \u9AD8");
  EXPECT_EQ(basic("A\u200D\u00A0B\tC\uFFFD\u0007"), "a b c");  // Cf/Cc/U+FFFD dropped, Zs -> space
  EXPECT_EQ(basic("cafe\u0301 \u201CX\u201D"), "caf\u00E9 \u201Cx\u201D");  // NFC, no quote fixing
}

TEST(ClipPreTokenizer, SplitsLikeTheRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("don't stop 42 times!!, ok"), (V{"don", "'t", "stop", "4", "2", "times", "!!,", "ok"}));
  EXPECT_EQ(pieces("they're we'll i'd it's"), (V{"they", "'re", "we", "'ll", "i", "'d", "it", "'s"}));
  EXPECT_EQ(pieces("x<|endoftext|>y !<|endoftext|>"),
            (V{"x", "<|endoftext|>", "y", "!<|", "endoftext", "|>"}));
  // IGNORECASE: long s folds to 's'; U+0345 matches no alternative; U+001C is not \s there.
  EXPECT_EQ(pieces("it'\u017F a\u0345b c\x1c"), (V{"it", "'\u017F", "a", "b", "c", "\x1c"}));
  EXPECT_EQ(pieces("\u6771\u4EAC\u306E 2\u00B2 \u00BD"), (V{"\u6771\u4EAC\u306E", "2", "\u00B2", "\u00BD"}));
}

TEST(ClipPreTokenizer, ByteTableIsGpt2s) {
  EXPECT_EQ(byte_char('!'), U'!');
  EXPECT_EQ(byte_char('~'), U'~');
  EXPECT_EQ(byte_char(0x00), char32_t{0x100});
  EXPECT_EQ(byte_char(' '), char32_t{0x120});
  EXPECT_EQ(byte_char(0x7F), char32_t{0x121});
  EXPECT_EQ(byte_char(0xA0), char32_t{0x142});
  EXPECT_EQ(byte_char(0xAD), char32_t{0x143});
  EXPECT_EQ(byte_char(0xAE), char32_t{0xAE});
  EXPECT_EQ(byte_symbols(U"\u00E9"), (std::vector<std::string>{"\u00C3", "\u00A9"}));
}

TEST(Bpe, MergesLowestRankEverywhereWithoutOverlap) {
  const auto merges = BpeMerges::parse("#version: 0.2\na b\nab c</w>\na a\n", "m.txt", 100);
  EXPECT_EQ(merges.size(), 3u);
  using V = std::vector<std::string>;
  EXPECT_EQ(merges.apply({"a", "b", "c"}), (V{"abc</w>"}));
  EXPECT_EQ(merges.apply({"a", "a", "a"}), (V{"aa", "a</w>"}));
  EXPECT_EQ(merges.apply({"z"}), (V{"z</w>"}));
  // A repeated rule takes its later rank, as Python's dict(zip(merges, range(n))) does.
  const auto repeated = BpeMerges::parse("#v\nx y\ny b</w>\nx y\n", "m.txt", 100);
  EXPECT_EQ(repeated.apply({"x", "y", "b"}), (V{"x", "yb</w>"}));
  // Only the first max_merges rules count (CLIP keeps 48 894); later lines are not even parsed.
  const auto capped = BpeMerges::parse("#v\nx y\ny b</w>\nnot a rule at all\n", "m.txt", 1);
  EXPECT_EQ(capped.size(), 1u);
  EXPECT_EQ(capped.apply({"x", "y", "b"}), (V{"xy", "b</w>"}));
  EXPECT_THROW(BpeMerges::parse("", "m.txt", 10), Error);
}
