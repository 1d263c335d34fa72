// 8-bit RGB images: the float→uint8 conversion of diffusers' numpy_to_pil, image grids, and a
// nearest-neighbour upscale (spec/pipeline.md §7–§8).
#pragma once

#include <cstdint>
#include <vector>

namespace octodiff {

// Row-major RGB, 3 bytes per pixel, no padding: rgb.size() == width * height * 3.
struct Image8 {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// The largest image this module makes or PNG reads/writes: both sides <= 32768 and at most 2^28
// pixels (768 MiB of RGB). Anything bigger is a corrupt header or a mistake, never a picture.
constexpr int kMaxImageSide = 32768;
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;
// Throws octodiff::Error (naming `what`) unless 0 < width, height and the limits above hold.
void check_image_size(int width, int height, const char* what);

// float32 HWC RGB in [0, 1] -> uint8 as numpy's `(images * 255).round().astype(uint8)`: the
// product is a float32 multiply, rounding is half-to-even (std::nearbyint in the default
// rounding mode). Unlike numpy (whose cast wraps), values outside [0, 255] are clamped and NaN
// becomes 0 — those only appear when something upstream already went wrong.
Image8 to_uint8(const float* hwc, int height, int width);

// Pastes equal-size images into a rows × cols grid, row-major: image i at
// x = (i % cols) * w, y = (i / cols) * h, on a black canvas of (cols*w) × (rows*h) — the docs'
// make_image_grid, except that fewer images than cells are allowed (the rest stays black).
// Requires 1 <= images.size() <= rows * cols.
Image8 make_grid(const std::vector<Image8>& images, int rows, int cols);

// A grid shape for n >= 1 images, favouring wide grids (rows × cols):
//   n <= 4      -> 1 × n           (a small batch reads as one strip; 4 -> 1×4, not 2×2)
//   5 <= n <= 8 -> 2 × ceil(n / 2) (8 -> 2×4, 5 -> 2×3)
//   n > 8       -> cols = ceil(sqrt(n)), rows = ceil(n / cols)  (9 -> 3×3, 10 -> 3×4, 16 -> 4×4)
void grid_shape(int n, int* rows, int* cols);

// Each pixel becomes a factor × factor block (factor >= 1), e.g. to show tiny test images.
Image8 upscale_nearest(const Image8& img, int factor);

}  // namespace octodiff

namespace octodiff {

// PIL's Image.resize(size, Image.LANCZOS) for RGB, as the Flax and diffusers img2img
// preprocessing call it: a separable Lanczos-3 filter widened by the scale when shrinking,
// coefficients normalised per output pixel and quantised to 22-bit fixed point, the horizontal
// pass first (when the width changes) rounded to 8 bits, then the vertical pass. Returns a copy
// when the size is unchanged, as PIL does.
Image8 resize_lanczos(const Image8& image, int width, int height);
// The same with PIL's Image.BICUBIC (Keys' cubic, a = -0.5, support 2 widened when shrinking),
// as CLIPImageProcessor resizes (preprocess/clip_image_processor.h).
Image8 resize_bicubic(const Image8& image, int width, int height);

}  // namespace octodiff
