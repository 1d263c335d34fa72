#include "io/image.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

using namespace octodiff;

namespace {

// numpy's rule spelled out without nearbyint: float32 product, round half to even, then (our
// choice) clamp and NaN -> 0.
int reference_u8(float x) {
  const float p = x * 255.0f;
  if (std::isnan(p)) return 0;
  const double f = std::floor(static_cast<double>(p));
  const double frac = static_cast<double>(p) - f;
  double r = frac < 0.5 ? f : frac > 0.5 ? f + 1 : (std::fmod(f, 2.0) == 0 ? f : f + 1);
  return r < 0 ? 0 : r > 255 ? 255 : static_cast<int>(r);
}

int convert_one(float x) {
  return to_uint8(std::vector<float>{x, 0, 0}.data(), 1, 1).rgb[0];
}

Image8 solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image8 im{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (size_t i = 0; i < im.rgb.size(); i += 3) {
    im.rgb[i] = r;
    im.rgb[i + 1] = g;
    im.rgb[i + 2] = b;
  }
  return im;
}

}  // namespace

TEST(ToUint8, ExactTiesRoundHalfToEven) {
  // x*255.0f == 0.5, 1.5, 2.5 exactly: numpy gives 0, 2, 2.
  for (auto [half, expected] : {std::pair{0.5f, 0}, {1.5f, 2}, {2.5f, 2}, {3.5f, 4}}) {
    const float x = half / 255.0f;
    if (x * 255.0f != half) continue;  // not an exact tie in float32; covered by the scan below
    EXPECT_EQ(convert_one(x), expected) << "x = " << half << "/255";
  }
  // Find every float x near (k + 0.5)/255 whose float32 product is exactly k + 0.5, for all k,
  // and check the even neighbour is chosen. There must be many such ties, on both parities.
  int ties_even = 0, ties_odd = 0;
  for (int k = 0; k < 255; ++k) {
    float x = (static_cast<float>(k) + 0.5f) / 255.0f;
    for (int s = 0; s < 8; ++s) x = std::nextafter(x, 0.0f);
    for (int s = 0; s < 17; ++s, x = std::nextafter(x, 1.0f)) {
      const float p = x * 255.0f;
      const int got = convert_one(x);
      ASSERT_EQ(got, reference_u8(x)) << "x = " << x << ", x*255 = " << p;
      if (p == static_cast<float>(k) + 0.5f) {
        EXPECT_EQ(got, k % 2 == 0 ? k : k + 1) << "tie at " << p;
        (k % 2 == 0 ? ties_even : ties_odd)++;
      }
    }
  }
  std::printf("exact ties found: %d with even floor, %d with odd floor\n", ties_even, ties_odd);
  EXPECT_GT(ties_even, 20);
  EXPECT_GT(ties_odd, 20);
}

TEST(ToUint8, RangeClampAndNan) {
  EXPECT_EQ(convert_one(0.0f), 0);
  EXPECT_EQ(convert_one(1.0f), 255);
  EXPECT_EQ(convert_one(-0.0f), 0);
  EXPECT_EQ(convert_one(-0.3f), 0);
  EXPECT_EQ(convert_one(1.7f), 255);
  EXPECT_EQ(convert_one(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(convert_one(std::numeric_limits<float>::infinity()), 255);
  EXPECT_EQ(convert_one(-std::numeric_limits<float>::infinity()), 0);
  // A dense sweep of [0, 1] against the spelled-out rule.
  for (int i = 0; i <= 100000; ++i) {
    const float x = static_cast<float>(i) / 100000.0f;
    ASSERT_EQ(convert_one(x), reference_u8(x)) << x;
  }
}

TEST(ToUint8, LayoutIsHwcRowMajor) {
  std::vector<float> hwc(2 * 3 * 3);
  for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = static_cast<float>(i) / 255.0f;
  Image8 im = to_uint8(hwc.data(), 2, 3);
  EXPECT_EQ(im.width, 3);
  EXPECT_EQ(im.height, 2);
  ASSERT_EQ(im.rgb.size(), 18u);
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(im.rgb[i], i);
  EXPECT_THROW(to_uint8(hwc.data(), 0, 3), Error);
}

TEST(Grid, TilesAtRowMajorPositionsAndBlackFill) {
  // 5 tiles of 3x2 into 2 rows x 3 cols; tile i is colour (10*i+1, 10*i+2, 10*i+3), with one
  // marked pixel so orientation inside the tile is checked too.
  std::vector<Image8> tiles;
  for (int i = 0; i < 5; ++i) {
    Image8 t = solid(3, 2, 10 * i + 1, 10 * i + 2, 10 * i + 3);
    t.rgb[(1 * 3 + 2) * 3] = 200 + i;  // pixel (x=2, y=1), red channel
    tiles.push_back(t);
  }
  Image8 g = make_grid(tiles, 2, 3);
  ASSERT_EQ(g.width, 9);
  ASSERT_EQ(g.height, 4);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 9; ++x) {
      const int i = (y / 2) * 3 + x / 3;  // tile index at this pixel
      const uint8_t* px = &g.rgb[(y * 9 + x) * 3];
      if (i >= 5) {
        EXPECT_EQ(px[0] | px[1] | px[2], 0) << "cell " << i << " must be black at " << x << "," << y;
        continue;
      }
      const bool marked = x % 3 == 2 && y % 2 == 1;
      EXPECT_EQ(px[0], marked ? 200 + i : 10 * i + 1) << x << "," << y;
      EXPECT_EQ(px[1], 10 * i + 2) << x << "," << y;
      EXPECT_EQ(px[2], 10 * i + 3) << x << "," << y;
    }
  }
}

TEST(Grid, RejectsBadInput) {
  std::vector<Image8> two{solid(2, 2, 1, 1, 1), solid(2, 2, 2, 2, 2)};
  EXPECT_THROW(make_grid(two, 1, 1), Error);  // does not fit
  EXPECT_THROW(make_grid({}, 1, 1), Error);
  EXPECT_THROW(make_grid(two, 0, 2), Error);
  std::vector<Image8> mixed{solid(2, 2, 1, 1, 1), solid(3, 2, 2, 2, 2)};
  EXPECT_THROW(make_grid(mixed, 1, 2), Error);
  Image8 broken = solid(2, 2, 1, 1, 1);
  broken.rgb.pop_back();
  EXPECT_THROW(make_grid({broken}, 1, 1), Error);
  EXPECT_NO_THROW(make_grid(two, 1, 2));
}

TEST(Grid, ShapeRule) {
  const int expected[17][2] = {{0, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 3}, {2, 3}, {2, 4}, {2, 4},
                               {3, 3}, {3, 4}, {3, 4}, {3, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}};
  for (int n = 1; n <= 16; ++n) {
    int rows = 0, cols = 0;
    grid_shape(n, &rows, &cols);
    EXPECT_EQ(rows, expected[n][0]) << "n = " << n;
    EXPECT_EQ(cols, expected[n][1]) << "n = " << n;
  }
  // Beyond the table: every image fits, and no row is entirely empty.
  for (int n = 1; n <= 2000; ++n) {
    int rows = 0, cols = 0;
    grid_shape(n, &rows, &cols);
    ASSERT_GE(rows * cols, n) << n;
    ASSERT_LT((rows - 1) * cols, n) << n;
    ASSERT_LE(rows, cols) << n;
  }
  int r, c;
  EXPECT_THROW(grid_shape(0, &r, &c), Error);
}

TEST(Upscale, NearestBlocks) {
  Image8 im{2, 1, {1, 2, 3, 4, 5, 6}};
  Image8 up = upscale_nearest(im, 3);
  ASSERT_EQ(up.width, 6);
  ASSERT_EQ(up.height, 3);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 6; ++x)
      for (int ch = 0; ch < 3; ++ch)
        EXPECT_EQ(up.rgb[(y * 6 + x) * 3 + ch], im.rgb[(x / 3) * 3 + ch]) << x << "," << y;
  EXPECT_EQ(upscale_nearest(im, 1).rgb, im.rgb);
  EXPECT_THROW(upscale_nearest(im, 0), Error);
  EXPECT_THROW(upscale_nearest(im, 20000), Error);  // 40000 wide: over the per-side limit
}
