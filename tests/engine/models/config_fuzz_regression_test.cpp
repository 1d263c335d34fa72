// Inputs fuzz_configs found (tests/data/fuzz-regressions/): each must be a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "models/configs.h"
#include "test_support.h"

using namespace octodiff;

namespace {

// tests/data/fuzz-regressions/FILE read as a VAE config must fail with an error naming `key`.
void expect_vae_config_error(const std::string& file, const std::string& key) {
  std::ifstream in(test::data_dir() / "fuzz-regressions" / file);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty()) << file;
  try {
    (void)VaeConfig::from_json(text.str(), "vae/config.json");
    FAIL() << "no error for " << file;
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << file;
  }
}

}  // namespace

// The tiny VAE's config with "norm_num_groups": 0: the channel check divided by it (UBSan:
// division by zero in configs.cpp) before the positivity check ran.
TEST(ConfigFuzzRegression, VaeWithZeroNormGroupsIsAClearError) {
  expect_vae_config_error("vae_config_zero_norm_groups.json", "norm_num_groups");
}

// The tiny VAE's config with "in_channels": 8888…883 (113 digits, so a JSON float 8.9e110): the
// int conversion was undefined behaviour (UBSan in fuzz_configs: "outside the range of
// representable values of type 'int'"). Now every integer setting must be a JSON integer that
// fits, else a clear error naming the key.
TEST(ConfigFuzzRegression, VaeWithAnOutOfRangeIntegerIsAClearError) {
  expect_vae_config_error("vae_config_huge_in_channels.json", "in_channels");
}

// An integer beyond int's range used to wrap (2^32 + 4 became 4, a valid channel count) and a
// fractional value was cut to an integer: both are errors naming the key now (4.0 still reads as 4).
TEST(ConfigFuzzRegression, IntegersMustFitAndBeIntegers) {
  for (const char* value : {"4294967300", "4.5", "-9223372036854775809", "1e300"}) {
    const std::string text = std::string(R"({"_class_name": "UNet2DConditionModel", "in_channels": )") + value + "}";
    try {
      (void)UNetConfig::from_json(text, "unet/config.json");
      ADD_FAILURE() << "no error for in_channels " << value;
    } catch (const Error& e) {
      std::printf("[error] %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("in_channels"), std::string::npos) << value;
    }
  }
}
