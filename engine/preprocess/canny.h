// ControlNet preprocessors: what turns a user's picture into a control image.
//
// Canny: OpenCV's cv::Canny (Debian's libopencv-imgproc) on the RGB image as it is, as the
// AUTOMATIC1111 sd-webui-controlnet "canny" module calls it (cv2.Canny(img, low, high) on the
// 3-channel uint8 image: OpenCV takes, per pixel, the gradient of the channel where it is
// largest), thresholds 100 / 200 by default; white edges (255) on black, copied to 3 channels
// (the extension's HWC3). Unlike the extension, the image is not first resized to a
// "processor resolution": the pipeline resizes the edge map to the generation size.
#pragma once

#include <string>

#include "io/image.h"

namespace octodiff {

struct CannyThresholds {
  double low = 100, high = 200;
};

Image8 canny_edges(const Image8& rgb, const CannyThresholds& thresholds = {});

// The preprocessors by name: "none" (the image as given) or "canny". Throws octodiff::Error
// naming the choices for anything else.
enum class ControlPreprocessor { None, Canny };
ControlPreprocessor parse_control_preprocessor(const std::string& name);
std::string control_preprocessor_name(ControlPreprocessor p);
Image8 preprocess_control_image(const Image8& image, ControlPreprocessor p);

}  // namespace octodiff
