#include "shape_class.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace octodiff::test {
namespace {

constexpr int kSize = 64;        // dataset.SIZE
constexpr int kSuper = 2;        // dataset.SS: samples per pixel side
constexpr int kBorder = 2;       // measure.BORDER
constexpr double kDist = 60.0;   // measure.DIST
constexpr int kMinPixels = 20;   // measure.MIN_PIXELS
constexpr double kRotations[] = {-0.3, -0.15, 0.0, 0.15, 0.3};
constexpr double kPi = 3.14159265358979323846;

using Mask = std::vector<uint8_t>;  // kSize × kSize, row-major

// Whether the sample point (x, y) lies inside the shape (dataset.shape_mask's tests).
bool inside(int shape, double x, double y, double cx, double cy, double r, double rot) {
  const double dx = x - cx, dy = y - cy;
  const double c = std::cos(rot), s = std::sin(rot);
  const double u = c * dx + s * dy, v = -s * dx + c * dy;
  switch (shape) {
    case 0: return dx * dx + dy * dy <= r * r;
    case 4: {
      const double d2 = dx * dx + dy * dy, inner = 0.55 * r;
      return d2 <= r * r && d2 >= inner * inner;
    }
    case 1: {
      const double h = r * 0.85;
      return std::fabs(u) <= h && std::fabs(v) <= h;
    }
    default: {  // triangle (3 sectors) or star (5)
      const int k = shape == 2 ? 3 : 5;
      const double ang = std::atan2(v, u) + kPi / 2, rad = std::sqrt(u * u + v * v);
      const double sector = 2 * kPi / k;
      double m = std::fmod(ang, sector);
      if (m < 0) m += sector;  // numpy's mod takes the divisor's sign
      const double a = m - sector / 2;
      if (shape == 2) return rad * std::cos(a) <= r * 0.5 * 1.15;
      const double t = std::fabs(a) / (sector / 2);
      return rad <= r * (1 - t) + 0.45 * r * t;
    }
  }
}

// Coverage of each pixel (the mean of its kSuper² samples), as dataset.shape_mask returns it.
std::vector<double> coverage(int shape, double cx, double cy, double r, double rot) {
  std::vector<double> cov(kSize * kSize, 0.0);
  for (int sy = 0; sy < kSize * kSuper; ++sy)
    for (int sx = 0; sx < kSize * kSuper; ++sx)
      if (inside(shape, (sx + 0.5) / kSuper, (sy + 0.5) / kSuper, cx, cy, r, rot))
        cov[(sy / kSuper) * kSize + sx / kSuper] += 1.0 / (kSuper * kSuper);
  return cov;
}

// Filled area at radius 1 (pixels / r²), from a render at r = 20 (a ring counts as its disc).
double area_per_r2(int shape) {
  const std::vector<double> cov = coverage(shape == 4 ? 0 : shape, 32.0, 32.0, 20.0, 0.0);
  double sum = 0;
  for (double v : cov) sum += v;
  return sum / 400.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Mask shape_region(const Image8& img) {
  auto px = [&](int x, int y, int c) { return static_cast<double>(img.rgb[(y * kSize + x) * 3 + c]); };
  std::vector<double> border[3];
  for (int y = 0; y < kSize; ++y)
    for (int x = 0; x < kSize; ++x)
      if (y < kBorder || y >= kSize - kBorder || x < kBorder || x >= kSize - kBorder)
        for (int c = 0; c < 3; ++c) border[c].push_back(px(x, y, c));
  const double bg[3] = {median(border[0]), median(border[1]), median(border[2])};
  Mask region(kSize * kSize);
  for (int y = 0; y < kSize; ++y)
    for (int x = 0; x < kSize; ++x) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c) d2 += (px(x, y, c) - bg[c]) * (px(x, y, c) - bg[c]);
      region[y * kSize + x] = std::sqrt(d2) > kDist;
    }
  return region;
}

// The region with every pixel added that is not 4-connected to the border through non-region pixels.
Mask fill_holes(const Mask& region) {
  Mask outside(region.size(), 0);
  std::vector<int> stack;
  for (int i = 0; i < kSize; ++i)
    for (int p : {i * kSize, i * kSize + kSize - 1, i, (kSize - 1) * kSize + i})
      if (!region[p]) stack.push_back(p);
  while (!stack.empty()) {
    const int p = stack.back();
    stack.pop_back();
    if (outside[p] || region[p]) continue;
    outside[p] = 1;
    const int y = p / kSize, x = p % kSize;
    if (y > 0) stack.push_back(p - kSize);
    if (y < kSize - 1) stack.push_back(p + kSize);
    if (x > 0) stack.push_back(p - 1);
    if (x < kSize - 1) stack.push_back(p + 1);
  }
  Mask filled(region.size());
  for (size_t p = 0; p < region.size(); ++p) filled[p] = !outside[p];
  return filled;
}

double best_iou(int shape, const Mask& region, double cx, double cy, double r) {
  double best = 0;
  for (double rot : kRotations) {
    const std::vector<double> cov = coverage(shape, cx, cy, r, rot);
    int inter = 0, uni = 0;
    for (size_t p = 0; p < region.size(); ++p) {
      const bool m = cov[p] >= 0.5;
      inter += m && region[p];
      uni += m || region[p];
    }
    best = std::max(best, static_cast<double>(inter) / uni);
  }
  return best;
}

}  // namespace

ShapeClassResult classify_shape(const Image8& img) {
  if (img.width != kSize || img.height != kSize)
    throw std::invalid_argument("classify_shape: the demo model's images are 64 × 64");
  ShapeClassResult out;
  const Mask region = shape_region(img);
  const int pixels = static_cast<int>(std::count(region.begin(), region.end(), 1));
  if (pixels < kMinPixels) return out;
  const Mask filled = fill_holes(region);
  double sx = 0, sy = 0, area = 0;
  for (int p = 0; p < kSize * kSize; ++p)
    if (filled[p]) sx += p % kSize, sy += p / kSize, area += 1;
  const double cx = sx / area + 0.5, cy = sy / area + 0.5;  // shape_mask: pixel centres at +0.5
  for (int k = 0; k < 5; ++k)
    out.iou[k] = best_iou(k, region, cx, cy, std::sqrt(area / area_per_r2(k)));
  const int best = static_cast<int>(std::max_element(out.iou.begin(), out.iou.end()) - out.iou.begin());
  out.shape = kShapeClasses[best];  // max_element keeps the first of equal IoUs: the class order
  out.hole_fraction = (area - pixels) / area;
  return out;
}

}  // namespace octodiff::test
