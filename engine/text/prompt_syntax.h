// Prompt syntaxes: plain text, or AUTOMATIC1111's emphasis syntax as its
// modules/prompt_parser.py `parse_prompt_attention` reads it:
//
//   (abc)       abc's weight × 1.1          ((abc)) × 1.21, and so on
//   (abc:1.3)   abc's weight × 1.3          (any "[+-]?[.\d]+" number, spaces allowed around it)
//   [abc]       abc's weight ÷ 1.1 (× 1/1.1)
//   \( \) \[ \] \\   the literal character;  a "\" before anything else vanishes
//   BREAK       (a whole word, upper case) ends the current 75-token chunk (pipeline/prompt_chunks.h)
//
// Unbalanced brackets, as A1111: a ")" or "]" or ":1.3)" with no open bracket is plain text; a
// bracket still open at the end applies its ×1.1 or ÷1.1 to everything after it. A ":" that is not
// a weight is text. Neighbouring runs with exactly equal weights are merged; an empty prompt is one
// empty run of weight 1. A weight that is not a number (":1.2.3)") is an octodiff::Error, where
// A1111 fails with Python's ValueError.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace octodiff {

enum class PromptSyntax { Plain, A1111 };
PromptSyntax parse_prompt_syntax(const std::string& name);  // "plain", "a1111"
std::string prompt_syntax_name(PromptSyntax s);               // "plain", "a1111"

// A run of text and its weight. A BREAK is the run {"BREAK", −1}, as in A1111, and like every run
// it is multiplied by the brackets around it and merged with equal neighbours: "(a BREAK b)" makes
// it {"BREAK", −1.1}, which A1111 (and so Octodiff) then reads as the text "BREAK", weight −1.1.
struct WeightedText {
  std::string text;
  double weight = 1.0;
  bool is_break() const { return weight == -1.0 && text == "BREAK"; }
  bool operator==(const WeightedText&) const = default;
};

// A1111's parse_prompt_attention on UTF-8 text.
std::vector<WeightedText> parse_prompt_attention(std::string_view text);

// The runs of a prompt under a syntax: Plain gives one run, the whole text with weight 1.
std::vector<WeightedText> parse_prompt(std::string_view text, PromptSyntax syntax);

}  // namespace octodiff
