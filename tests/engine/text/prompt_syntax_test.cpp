// A1111's emphasis parser. The expected values of the first group are the examples in the
// docstring of parse_prompt_attention in AUTOMATIC1111's modules/prompt_parser.py, written here
// from our knowledge of that docstring (the file could not be downloaded to copy them from); the
// weights are compared exactly, as the same double products in the same order as Python's.
#include "text/prompt_syntax.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"

using namespace octodiff;

namespace {

using Runs = std::vector<WeightedText>;

std::string show(const Runs& runs) {
  std::ostringstream out;
  out.precision(17);
  for (const auto& r : runs) out << "['" << r.text << "', " << r.weight << "] ";
  return out.str();
}

void expect_runs(const std::string& prompt, const Runs& expected) {
  const Runs got = parse_prompt_attention(prompt);
  EXPECT_EQ(got, expected) << prompt << "\n got: " << show(got) << "\n expected: " << show(expected);
}

}  // namespace

TEST(PromptSyntax, A1111DocstringExamples) {
  expect_runs("normal text", {{"normal text", 1.0}});
  expect_runs("an (important) word", {{"an ", 1.0}, {"important", 1.1}, {" word", 1.0}});
  expect_runs("(unbalanced", {{"unbalanced", 1.1}});
  expect_runs("\\(literal\\]", {{"(literal]", 1.0}});
  expect_runs("(unnecessary)(parens)", {{"unnecessaryparens", 1.1}});
  // [['a ', 1.0], ['house', 1.5730000000000004], [' ', 1.1], ['on', 1.0], [' a ', 1.1],
  //  ['hill', 0.55], [', sun, ', 1.1], ['sky', 1.4641000000000006], ['.', 1.1]]
  const Runs house = parse_prompt_attention("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).");
  ASSERT_EQ(house.size(), 9u) << show(house);
  const std::vector<std::string> texts{"a ", "house", " ", "on", " a ", "hill", ", sun, ", "sky", "."};
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(house[i].text, texts[i]) << i;
  EXPECT_EQ(house[0].weight, 1.0);
  EXPECT_EQ(house[1].weight, 1.5730000000000004);
  EXPECT_EQ(house[2].weight, 1.1);
  EXPECT_EQ(house[3].weight, 1.0);
  EXPECT_EQ(house[4].weight, 1.1);
  EXPECT_EQ(house[5].weight, 0.55);
  EXPECT_EQ(house[6].weight, 1.1);
  EXPECT_EQ(house[7].weight, 1.4641000000000006);
  EXPECT_EQ(house[8].weight, 1.1);
}

TEST(PromptSyntax, NestingWeightsAndSquareBrackets) {
  expect_runs("((word))", {{"word", 1.1 * 1.1}});
  expect_runs("(word:1.3)", {{"word", 1.3}});
  expect_runs("( word : 0.25 )", {{" word ", 0.25}});
  expect_runs("(word:-1)", {{"word", -1.0}});
  expect_runs("[word]", {{"word", 1 / 1.1}});
  expect_runs("[[word]]", {{"word", 1 / 1.1 * (1 / 1.1)}});
  // 1.1 · (1/1.1) is exactly 1.0 in doubles, so "c" merges with " d" (as in Python).
  expect_runs("a [b (c)] d", {{"a ", 1.0}, {"b ", 1 / 1.1}, {"c d", 1.0}});
  expect_runs("", {{"", 1.0}});
}

TEST(PromptSyntax, UnbalancedBracketsAndColonsAreText) {
  expect_runs("a) b] c", {{"a) b] c", 1.0}});
  expect_runs("word:1.3)", {{"word:1.3)", 1.0}});
  expect_runs("time: 10:30", {{"time: 10:30", 1.0}});
  expect_runs("(a:b)", {{"a:b", 1.1}});
  expect_runs("[unbalanced", {{"unbalanced", 1 / 1.1}});
  expect_runs("a (b [c", {{"a ", 1.0}, {"b ", 1.1}, {"c", 1.1 * (1 / 1.1)}});
}

TEST(PromptSyntax, Escapes) {
  expect_runs("\\(a\\) \\[b\\]", {{"(a) [b]", 1.0}});
  expect_runs("back\\\\slash", {{"back\\slash", 1.0}});
  expect_runs("lone \\x", {{"lone x", 1.0}});  // a "\" before another character vanishes
  expect_runs("(\\(x\\))", {{"(x)", 1.1}});
}

TEST(PromptSyntax, Break) {
  const Runs runs = parse_prompt_attention("a cat BREAK a dog");
  ASSERT_EQ(runs.size(), 3u) << show(runs);
  EXPECT_EQ(runs[0], (WeightedText{"a cat", 1.0}));
  EXPECT_TRUE(runs[1].is_break());
  EXPECT_EQ(runs[2], (WeightedText{"a dog", 1.0}));
  // Only the whole upper-case word: "BREAKFAST" and "break" are text.
  expect_runs("BREAKFAST break", {{"BREAKFAST break", 1.0}});
  expect_runs("(cat)BREAK dog", {{"cat", 1.1}, {"", 1.0}, {"BREAK", -1.0}, {"dog", 1.0}});
  // Inside brackets the marker is multiplied like any run and stops being a BREAK (as A1111).
  const Runs inside = parse_prompt_attention("(a BREAK b)");
  ASSERT_EQ(inside.size(), 3u) << show(inside);
  EXPECT_FALSE(inside[1].is_break());
  EXPECT_EQ(inside[1].weight, -1.0 * 1.1);
}

TEST(PromptSyntax, PlainIsOneRunAndBadWeightsAreErrors) {
  const Runs plain = parse_prompt("a (b:1.5) BREAK [c]", PromptSyntax::Plain);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0], (WeightedText{"a (b:1.5) BREAK [c]", 1.0}));
  EXPECT_THROW(parse_prompt_attention("(a:1.2.3)"), Error);
  EXPECT_THROW(parse_prompt_attention("(a:.)"), Error);
  EXPECT_EQ(parse_prompt_syntax("a1111"), PromptSyntax::A1111);
  EXPECT_EQ(prompt_syntax_name(PromptSyntax::Plain), "plain");
  EXPECT_THROW(parse_prompt_syntax("comfy"), Error);
}
