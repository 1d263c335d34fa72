#include "preprocess/canny.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "core/error.h"

namespace octodiff {

Image8 canny_edges(const Image8& rgb, const CannyThresholds& thresholds) {
  check_image_size(rgb.width, rgb.height, "Canny input");
  if (rgb.rgb.size() != static_cast<size_t>(rgb.width) * rgb.height * 3)
    fail("Canny input: ", rgb.rgb.size(), " bytes for a ", rgb.width, "×", rgb.height, " RGB image");
  if (!(thresholds.low >= 0 && thresholds.high >= 0))
    fail("Canny thresholds must be non-negative, got ", thresholds.low, " and ", thresholds.high);
  // A const view of the pixels (cv::Mat does not copy them).
  const cv::Mat image(rgb.height, rgb.width, CV_8UC3, const_cast<uint8_t*>(rgb.rgb.data()));
  cv::Mat edges;
  cv::Canny(image, edges, thresholds.low, thresholds.high);
  Image8 out{rgb.width, rgb.height, std::vector<uint8_t>(rgb.rgb.size())};
  for (int y = 0; y < rgb.height; ++y) {
    const uint8_t* row = edges.ptr<uint8_t>(y);
    for (int x = 0; x < rgb.width; ++x)
      for (int c = 0; c < 3; ++c) out.rgb[(static_cast<size_t>(y) * rgb.width + x) * 3 + c] = row[x];
  }
  return out;
}

ControlPreprocessor parse_control_preprocessor(const std::string& name) {
  if (name == "none") return ControlPreprocessor::None;
  if (name == "canny") return ControlPreprocessor::Canny;
  fail("unknown control image preprocessor '", name, "' (expected 'canny' or 'none')");
}

std::string control_preprocessor_name(ControlPreprocessor p) { return p == ControlPreprocessor::Canny ? "canny" : "none"; }

Image8 preprocess_control_image(const Image8& image, ControlPreprocessor p) {
  return p == ControlPreprocessor::Canny ? canny_edges(image) : image;
}

}  // namespace octodiff
