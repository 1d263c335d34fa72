// resize_lanczos, resize_bicubic (image.h): PIL's 8-bit resampling (libImaging/Resample.c) for its
// Lanczos and bicubic filters.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/image.h"

namespace octodiff {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS for 8-bit images

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double lanczos3(double x) { return (x >= -3.0 && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0; }

// PIL's bicubic_filter: Keys' cubic convolution with a = -0.5, support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

struct Filter {
  double (*fn)(double);
  double support;
};
constexpr Filter kLanczos{lanczos3, 3.0};
constexpr Filter kBicubic{bicubic, 2.0};

// One output pixel's taps: the first input index and its fixed-point weights.
struct Taps {
  int first = 0;
  std::vector<int32_t> weights;
};

// PIL's precompute_coeffs + normalize_coeffs_8bpc for in_size → out_size.
std::vector<Taps> filter_taps(const Filter& filter, int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  std::vector<Taps> taps(out_size);
  std::vector<double> k;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    k.assign(std::max(xmax, 0), 0.0);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = filter.fn((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    taps[xx].first = xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      const double fixed = w * (1 << kPrecisionBits);
      taps[xx].weights.push_back(static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed));
    }
  }
  return taps;
}

uint8_t clip8(int32_t acc) { return static_cast<uint8_t>(std::clamp(acc >> kPrecisionBits, 0, 255)); }

// One pass along x (`horizontal`) or y from `in` (in_w × in_h) to out_w × out_h.
Image8 resample_pass(const Filter& filter, const Image8& in, int out_w, int out_h, bool horizontal) {
  const std::vector<Taps> taps = filter_taps(filter, horizontal ? in.width : in.height, horizontal ? out_w : out_h);
  Image8 out{out_w, out_h, std::vector<uint8_t>(size_t(out_w) * out_h * 3)};
  for (int y = 0; y < out_h; ++y)
    for (int x = 0; x < out_w; ++x) {
      const Taps& t = taps[horizontal ? x : y];
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (size_t j = 0; j < t.weights.size(); ++j) {
          const int sx = horizontal ? t.first + static_cast<int>(j) : x;
          const int sy = horizontal ? y : t.first + static_cast<int>(j);
          acc += in.rgb[(size_t(sy) * in.width + sx) * 3 + c] * t.weights[j];
        }
        out.rgb[(size_t(y) * out_w + x) * 3 + c] = clip8(acc);
      }
    }
  return out;
}

Image8 resize_with(const Filter& filter, const Image8& image, int width, int height, const char* what) {
  check_image_size(width, height, what);
  if (image.rgb.size() != size_t(image.width) * image.height * 3)
    fail(what, ": the image's pixels do not match its ", image.width, "×", image.height, " size");
  Image8 out = image;
  if (width != image.width) out = resample_pass(filter, out, width, image.height, true);
  if (height != image.height) out = resample_pass(filter, out, width, height, false);
  return out;
}

}  // namespace

Image8 resize_lanczos(const Image8& image, int width, int height) {
  return resize_with(kLanczos, image, width, height, "resize_lanczos target");
}

Image8 resize_bicubic(const Image8& image, int width, int height) {
  return resize_with(kBicubic, image, width, height, "resize_bicubic target");
}

}  // namespace octodiff
