// A1111 settings fields (pipeline/a1111_fields.h): the same fields as the std::regex patterns
// they replace, on hand-picked lines and on thousands of random ones; and a PNG settings text
// with a very long value or key, which made the regex overflow the stack or take quadratic time.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>

#include "pipeline/a1111_fields.h"
#include "pipeline/metadata.h"

using namespace octodiff;

namespace {

// What the old code did: one match after another of `re`, groups 1 and 2.
TextFields regex_fields(const std::string& s, const std::regex& re) {
  TextFields out;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace_back((*it)[1], (*it)[2]);
  return out;
}

const std::regex kSettings(R"(([A-Za-z][A-Za-z0-9 +]*): ("[^"]*"|[^,]*)(,|$))");
const std::regex kControlNet(R"(([A-Za-z][A-Za-z ]*): ([^,]*)(, |$))");

// A random line over the characters that matter to the patterns (a settings line has no '\n').
std::string random_line(std::mt19937& rng) {
  static const std::string alphabet = "aZ9 +:,\"\"::,,  bx-";
  std::string s(rng() % 40, ' ');
  for (char& c : s) c = alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace

TEST(A1111Fields, SameAsTheRegexOnKnownLines) {
  const std::vector<std::string> lines = {
      "Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 42, Size: 512x512, Model hash: abc123, Model: sd15",
      R"(Steps: 4, Lora hashes: "one: aa11, two: bb22", ControlNet 0: "Module: canny, Model: cn, Weight: 1.0", Seed: 1)",
      R"(Steps: 4, Bad: "unclosed, Seed: 3)",
      R"(Steps: 4, Q: "quoted" trailing, Seed: 3)",
      "Steps: , Empty: , End: ",
      " leading: x,1Digit: y, Sp ace: z,Model hash : w",
      "no fields here",
      "Steps:20, Seed: 1",
      "a: b: c, d: e",
      "",
  };
  for (const std::string& line : lines) {
    EXPECT_EQ(a1111_settings_fields(line), regex_fields(line, kSettings)) << line;
    EXPECT_EQ(controlnet_fields(line), regex_fields(line, kControlNet)) << line;
  }
  const TextFields f = a1111_settings_fields(lines[1]);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[1], (std::pair<std::string, std::string>{"Lora hashes", R"("one: aa11, two: bb22")"}));
}

TEST(A1111Fields, SameAsTheRegexOnRandomLines) {
  std::mt19937 rng(1126);
  int fields = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string line = random_line(rng);
    const TextFields expected = regex_fields(line, kSettings);
    ASSERT_EQ(a1111_settings_fields(line), expected) << "'" << line << "'";
    ASSERT_EQ(controlnet_fields(line), regex_fields(line, kControlNet)) << "'" << line << "'";
    fields += static_cast<int>(expected.size());
  }
  std::printf("[a1111 fields] 20000 random lines, %d settings fields, all as the regex read them\n", fields);
  EXPECT_GT(fields, 1000);  // the lines do have fields
}

// A PNG from a stranger: a 4 MB value, and a 1 MB key-like run with no ": " after it. The regex
// recursed once per character of the value (a stack overflow) and retried the run at each letter.
TEST(A1111Fields, LongValuesAndKeysReadInLinearTime) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string long_value = "a prompt\nSteps: 3, Model: " + std::string(4 << 20, 'm') + ", Seed: 9";
  const auto m = parse_png_metadata({{"parameters", long_value}});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->steps, 3);
  EXPECT_EQ(m->seed, 9);
  EXPECT_EQ(m->model_name.size(), size_t{4} << 20);
  const std::string long_key = "a prompt\nSteps: 5, " + std::string(1 << 20, 'k') + ", Seed: 4";
  const auto k = parse_png_metadata({{"parameters", long_key}});
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->seed, 4);
  const std::string quoted = "p\nSteps: 2, ControlNet 0: \"Module: canny, Model: " + std::string(1 << 20, 'c') + "\"";
  const auto c = parse_png_metadata({{"parameters", quoted}});
  ASSERT_TRUE(c.has_value());
  ASSERT_EQ(c->controlnets.size(), 1u);
  EXPECT_EQ(c->controlnets[0].name.size(), size_t{1} << 20);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[a1111 fields] 6 MB of settings text read in %.3f s\n", seconds);
}
