// The "Key: value" fields of an A1111 settings line (the last line of a PNG's "parameters" text)
// and of the sd-webui-controlnet extension's "ControlNet N" value, read in one pass each.
//
// They were read with std::regex, which recursed once per character of a value (a long value in
// a stranger's PNG overflowed the stack) and retried a long key at each of its letters (quadratic
// time). These functions give the same fields the patterns gave:
//   settings:   ([A-Za-z][A-Za-z0-9 +]*): ("[^"]*"|[^,]*)(,|$)   one match after another
//   ControlNet: ([A-Za-z][A-Za-z ]*): ([^,]*)(, |$)
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octodiff {

using TextFields = std::vector<std::pair<std::string, std::string>>;  // (key, value) in order

// "Steps: 20, Sampler: Euler a, Lora hashes: \"a: 1, b: 2\"": a quoted value (followed by ',' or
// the end) keeps its quotes and commas; any other value runs to the next ','.
TextFields a1111_settings_fields(std::string_view line);
// "Module: canny, Model: name, Weight: 1.0": fields separated by ", ".
TextFields controlnet_fields(std::string_view value);

}  // namespace octodiff
