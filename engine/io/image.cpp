#include "io/image.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace octodiff {

void check_image_size(int width, int height, const char* what) {
  if (width <= 0 || height <= 0) fail(what, ": image size ", width, "x", height, " is empty or negative");
  if (width > kMaxImageSide || height > kMaxImageSide || int64_t{width} * int64_t{height} > kMaxImagePixels)
    fail(what, ": image size ", width, "x", height, " is too large (at most ", kMaxImageSide,
         " pixels per side and ", kMaxImagePixels, " pixels in all)");
}

Image8 to_uint8(const float* hwc, int height, int width) {
  check_image_size(width, height, "to_uint8");
  Image8 out;
  out.width = width;
  out.height = height;
  const size_t n = static_cast<size_t>(width) * static_cast<size_t>(height) * 3;
  out.rgb.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // float32 product first (as numpy does for an f32 array), then round half to even.
    const float v = std::nearbyint(hwc[i] * 255.0f);
    // `!(v >= 0)` also catches NaN.
    out.rgb[i] = !(v >= 0.0f) ? 0 : v >= 255.0f ? 255 : static_cast<uint8_t>(v);
  }
  return out;
}

Image8 make_grid(const std::vector<Image8>& images, int rows, int cols) {
  if (rows <= 0 || cols <= 0) fail("image grid: ", rows, "x", cols, " is not a grid shape");
  if (images.empty()) fail("image grid: no images");
  if (static_cast<int64_t>(images.size()) > int64_t{rows} * cols)
    fail("image grid: ", images.size(), " images do not fit in ", rows, "x", cols, " cells");
  const int w = images[0].width, h = images[0].height;
  for (size_t i = 0; i < images.size(); ++i) {
    const Image8& im = images[i];
    if (im.width != w || im.height != h)
      fail("image grid: image ", i, " is ", im.width, "x", im.height, ", the first is ", w, "x", h,
           "; all images must have the same size");
    if (im.rgb.size() != static_cast<size_t>(w) * h * 3)
      fail("image grid: image ", i, " holds ", im.rgb.size(), " bytes, expected ", size_t(w) * h * 3);
  }
  if (int64_t{cols} * w > kMaxImageSide || int64_t{rows} * h > kMaxImageSide)
    fail("image grid: ", rows, "x", cols, " tiles of ", w, "x", h, " exceed ", kMaxImageSide,
         " pixels per side");
  Image8 grid;
  grid.width = cols * w;
  grid.height = rows * h;
  check_image_size(grid.width, grid.height, "image grid");
  grid.rgb.assign(static_cast<size_t>(grid.width) * grid.height * 3, 0);
  const size_t tile_row = static_cast<size_t>(w) * 3, grid_row = static_cast<size_t>(grid.width) * 3;
  for (size_t i = 0; i < images.size(); ++i) {
    const size_t x0 = (i % cols) * static_cast<size_t>(w), y0 = (i / cols) * static_cast<size_t>(h);
    for (int y = 0; y < h; ++y)
      std::memcpy(&grid.rgb[(y0 + y) * grid_row + x0 * 3], &images[i].rgb[y * tile_row], tile_row);
  }
  return grid;
}

void grid_shape(int n, int* rows, int* cols) {
  if (n <= 0) fail("image grid: cannot lay out ", n, " images");
  if (n <= 4) {
    *rows = 1;
    *cols = n;
  } else if (n <= 8) {
    *rows = 2;
    *cols = (n + 1) / 2;
  } else {
    int c = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
    while (c * c < n) ++c;  // guard against sqrt rounding down
    *cols = c;
    *rows = (n + c - 1) / c;
  }
}

Image8 upscale_nearest(const Image8& img, int factor) {
  if (factor < 1) fail("upscale: factor ", factor, " must be at least 1");
  if (img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3 || img.width <= 0 || img.height <= 0)
    fail("upscale: image ", img.width, "x", img.height, " holds ", img.rgb.size(), " bytes");
  if (int64_t{img.width} * factor > kMaxImageSide || int64_t{img.height} * factor > kMaxImageSide)
    fail("upscale: ", img.width, "x", img.height, " by ", factor, " exceeds ", kMaxImageSide,
         " pixels per side");
  Image8 out;
  out.width = img.width * factor;
  out.height = img.height * factor;
  check_image_size(out.width, out.height, "upscale");
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  const size_t out_row = static_cast<size_t>(out.width) * 3;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* dst = &out.rgb[static_cast<size_t>(y) * factor * out_row];
    const uint8_t* src = &img.rgb[static_cast<size_t>(y) * img.width * 3];
    for (int x = 0; x < img.width; ++x)
      for (int k = 0; k < factor; ++k) std::memcpy(dst + (size_t(x) * factor + k) * 3, src + x * 3, 3);
    for (int k = 1; k < factor; ++k) std::memcpy(dst + k * out_row, dst, out_row);
  }
  return out;
}

}  // namespace octodiff
