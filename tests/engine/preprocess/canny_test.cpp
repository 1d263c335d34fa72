// The Canny preprocessor (OpenCV) on synthetic images: edges where the image has them, nowhere else.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"
#include "preprocess/canny.h"

using namespace octodiff;

namespace {

// A dark field with a bright square at [x0, x1) × [y0, y1).
Image8 square(int w, int h, int x0, int y0, int x1, int y1) {
  Image8 im{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3, 20)};
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      for (int c = 0; c < 3; ++c) im.rgb[(static_cast<size_t>(y) * w + x) * 3 + c] = c == 0 ? 230 : 200;
  return im;
}

uint8_t at(const Image8& im, int x, int y, int c = 0) { return im.rgb[(static_cast<size_t>(y) * im.width + x) * 3 + c]; }

}  // namespace

TEST(Canny, EdgesOnTheSquaresBorderOnly) {
  const Image8 im = square(64, 48, 16, 12, 40, 36);
  const Image8 edges = canny_edges(im);
  ASSERT_EQ(edges.width, 64);
  ASSERT_EQ(edges.height, 48);
  int on = 0, off_border = 0;
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x) {
      const uint8_t v = at(edges, x, y);
      EXPECT_TRUE(v == 0 || v == 255);
      EXPECT_EQ(at(edges, x, y, 1), v);  // three equal channels
      EXPECT_EQ(at(edges, x, y, 2), v);
      if (!v) continue;
      ++on;
      // Within one pixel of the square's border.
      const bool near_x = (x >= 15 && x <= 16) || (x >= 39 && x <= 40);
      const bool near_y = (y >= 11 && y <= 12) || (y >= 35 && y <= 36);
      const bool inside_span = x >= 15 && x <= 40 && y >= 11 && y <= 36;
      if (!(inside_span && (near_x || near_y))) ++off_border;
    }
  std::printf("[canny] %d edge pixels, %d away from the square's border\n", on, off_border);
  EXPECT_EQ(off_border, 0);
  // Every side of the square is traced: its middle rows and columns have an edge pixel.
  auto any_in_row = [&](int y, int x0, int x1) {
    for (int x = x0; x <= x1; ++x)
      if (at(edges, x, y)) return true;
    return false;
  };
  auto any_in_col = [&](int x, int y0, int y1) {
    for (int y = y0; y <= y1; ++y)
      if (at(edges, x, y)) return true;
    return false;
  };
  EXPECT_TRUE(any_in_row(24, 15, 16));  // left side
  EXPECT_TRUE(any_in_row(24, 39, 40));  // right side
  EXPECT_TRUE(any_in_col(28, 11, 12));  // top
  EXPECT_TRUE(any_in_col(28, 35, 36));  // bottom
}

TEST(Canny, FlatAndWeakImagesHaveNoEdges) {
  const Image8 flat = square(32, 32, 0, 0, 0, 0);
  for (uint8_t v : canny_edges(flat).rgb) ASSERT_EQ(v, 0);
  // A step of 10 levels: a gradient far below the low threshold 100 (Sobel: 4·10 = 40).
  Image8 weak = flat;
  for (int y = 0; y < 32; ++y)
    for (int x = 16; x < 32; ++x)
      for (int c = 0; c < 3; ++c) weak.rgb[(static_cast<size_t>(y) * 32 + x) * 3 + c] = 30;
  for (uint8_t v : canny_edges(weak).rgb) ASSERT_EQ(v, 0);
}

TEST(Canny, NamesAndBadInput) {
  EXPECT_EQ(parse_control_preprocessor("canny"), ControlPreprocessor::Canny);
  EXPECT_EQ(parse_control_preprocessor("none"), ControlPreprocessor::None);
  EXPECT_THROW(parse_control_preprocessor("depth"), Error);
  Image8 broken{8, 8, std::vector<uint8_t>(10)};
  EXPECT_THROW(canny_edges(broken), Error);
  const Image8 im = square(8, 8, 2, 2, 6, 6);
  EXPECT_EQ(preprocess_control_image(im, ControlPreprocessor::None).rgb, im.rgb);
}
