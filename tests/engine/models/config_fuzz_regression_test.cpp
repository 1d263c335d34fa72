// Inputs fuzz_configs found (tests/data/fuzz-regressions/): each must be a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "models/configs.h"
#include "test_support.h"

using namespace octodiff;

// The tiny VAE's config with "norm_num_groups": 0: the channel check divided by it (UBSan:
// division by zero in configs.cpp) before the positivity check ran.
TEST(ConfigFuzzRegression, VaeWithZeroNormGroupsIsAClearError) {
  std::ifstream in(test::data_dir() / "fuzz-regressions" / "vae_config_zero_norm_groups.json");
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  try {
    (void)VaeConfig::from_json(text.str(), "vae/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("norm_num_groups"), std::string::npos);
  }
}
