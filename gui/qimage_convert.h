// Engine images (io/image.h: RGB, 8 bits per channel) to and from QImage, deep copies. In the
// QtGui-only sheet library, so the app and octodiff-cli's sheet renderer share one conversion.
#pragma once

#include <QImage>

#include "io/image.h"

namespace octodiff::gui {

QImage toQImage(const Image8& image);
Image8 toImage8(const QImage& image);

}  // namespace octodiff::gui
