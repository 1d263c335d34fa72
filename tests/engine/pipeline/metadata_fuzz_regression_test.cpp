// PNG metadata that fuzz_png_metadata found crashing or misreading: each must be read as "not
// Octodiff's" (nullopt, so the A1111 text is tried next) without an exception escaping.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/metadata.h"

using namespace octodiff;

namespace {

std::optional<ImageMetadata> read_json(const std::string& json) { return parse_png_metadata({{"octodiff", json}}); }

// A valid Octodiff JSON chunk to mutate one key of.
std::string chunk(const std::string& key, const std::string& value) {
  std::string j = R"({"generator": "octodiff", "prompts": ["a red circle"], "seed": 42, "steps": 20,)"
                  R"( "guidance_scale": 7.5, "scheduler": "pndm", "width": 64, "height": 64)";
  return j + ", \"" + key + "\": " + value + "}";
}

}  // namespace

// {"generator": 5}: the generator check called j.value("generator", "") outside the reader's
// try, so the type_error for a number escaped parse_png_metadata and terminated the fuzzer (and
// would have crashed the app importing such a PNG).
TEST(MetadataFuzzRegression, NonStringGeneratorIsNotOurs) {
  for (const char* g : {"5", "7.5", "null", "[\"octodiff\"]", "{}"})
    EXPECT_NO_THROW(EXPECT_FALSE(read_json(std::string("{\"generator\": ") + g + "}").has_value()) << g);
}

TEST(MetadataFuzzRegression, TheValidChunkReads) {
  const auto m = read_json(chunk("devices", "2"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->steps, 20);
  EXPECT_EQ(m->devices, 2);
}

// Integers that do not fit (1e300 was undefined behaviour; 2^32 + 20 wrapped to 20 and read as a
// valid step count) make the chunk unreadable instead of turning into other numbers.
TEST(MetadataFuzzRegression, OutOfRangeNumbersAreNotReadAsOtherNumbers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"steps", "1e300"}, {"steps", "4294967316"}, {"seed", "1e300"}, {"width", "-1e300"},
      {"devices", "4294967298"}, {"comma_backtrack", "1e20"}, {"clip_skip", "1e20"}, {"device_key", "[4294967296, 1]"},
      {"loras", R"([{"name": "x", "strength": 1e300}])"}};
  for (const auto& [key, value] : cases) {
    std::string json = chunk(key, value);
    if (key == "steps" || key == "seed" || key == "width") {  // replace the valid value in the base
      json = chunk("devices", "1");
      const auto at = json.find("\"" + key + "\": ");
      const auto end = json.find_first_of(",}", at);
      json.replace(at, end - at, "\"" + key + "\": " + value);
    }
    std::optional<ImageMetadata> m;
    EXPECT_NO_THROW(m = read_json(json)) << json;
    EXPECT_FALSE(m.has_value()) << json;
  }
}

// karras_sigmas must be a boolean (for a scheduler that has them; the others ignore the key).
TEST(MetadataFuzzRegression, KarrasSigmasOfTheWrongTypeMakeTheChunkUnreadable) {
  for (const char* value : {"\"yes\"", "1", "null", "[true]"}) {
    std::string json = chunk("karras_sigmas", value);
    json.replace(json.find("\"pndm\""), 6, "\"dpm++\"");
    std::optional<ImageMetadata> m;
    EXPECT_NO_THROW(m = read_json(json)) << json;
    EXPECT_FALSE(m.has_value()) << json;
  }
  std::string valid = chunk("karras_sigmas", "true");
  valid.replace(valid.find("\"pndm\""), 6, "\"dpm++\"");
  const auto m = read_json(valid);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->karras_sigmas, std::optional(true));
  EXPECT_FALSE(read_json(chunk("karras_sigmas", "true"))->karras_sigmas.has_value());  // PNDM has none
}
