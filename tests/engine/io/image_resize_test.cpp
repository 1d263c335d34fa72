// resize_lanczos against PIL's Image.resize(..., Image.LANCZOS) (goldens made by
// tools/goldens/make_img2img_goldens.py with the PIL of /usr/bin/python3).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "io/image.h"
#include "io/png.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::filesystem::path golden(const std::string& name) { return test::tiny_sd_dir() / "goldens" / name; }

class LanczosMatchesPil : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(LanczosMatchesPil, Exactly) {
  const auto [w, h] = GetParam();
  const Image8 src = read_png(golden("lanczos_src.png"));
  ASSERT_EQ(src.width, 67);
  ASSERT_EQ(src.height, 45);
  const Image8 ref = read_png(golden("lanczos_" + std::to_string(w) + "x" + std::to_string(h) + ".png"));
  const Image8 got = resize_lanczos(src, w, h);
  ASSERT_EQ(got.width, w);
  ASSERT_EQ(got.height, h);
  int max_diff = 0;
  size_t differing = 0;
  for (size_t i = 0; i < ref.rgb.size(); ++i) {
    const int d = std::abs(int(got.rgb[i]) - int(ref.rgb[i]));
    max_diff = std::max(max_diff, d);
    differing += d != 0;
  }
  std::printf("lanczos 67x45 -> %dx%d: max |diff| %d, %zu of %zu bytes differ from PIL\n", w, h, max_diff, differing,
              ref.rgb.size());
  EXPECT_EQ(max_diff, 0);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LanczosMatchesPil,
                         ::testing::Values(std::pair{32, 32}, std::pair{80, 50}, std::pair{64, 45},
                                           std::pair{67, 30}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
                         });

TEST(Lanczos, SameSizeIsACopyAndBadSizesAreRefused) {
  const Image8 src = read_png(golden("lanczos_src.png"));
  EXPECT_EQ(resize_lanczos(src, 67, 45).rgb, src.rgb);
  EXPECT_THROW(resize_lanczos(src, 0, 10), Error);
  Image8 broken = src;
  broken.rgb.resize(10);
  EXPECT_THROW(resize_lanczos(broken, 32, 32), Error);
}

}  // namespace
