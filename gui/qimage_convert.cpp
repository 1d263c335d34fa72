#include "qimage_convert.h"

#include <cstring>

namespace octodiff::gui {

QImage toQImage(const Image8& image) {
  QImage out(image.width, image.height, QImage::Format_RGB888);
  for (int y = 0; y < image.height; ++y)
    std::memcpy(out.scanLine(y), image.rgb.data() + static_cast<size_t>(y) * image.width * 3,
                static_cast<size_t>(image.width) * 3);
  return out;
}

Image8 toImage8(const QImage& image) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  Image8 out;
  out.width = rgb.width();
  out.height = rgb.height();
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y)
    std::memcpy(out.rgb.data() + static_cast<size_t>(y) * out.width * 3, rgb.constScanLine(y),
                static_cast<size_t>(out.width) * 3);
  return out;
}

}  // namespace octodiff::gui
