#include "sheet_render.h"

#include "qimage_convert.h"

#include <QFont>
#include <QFontMetrics>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace octodiff::gui {
namespace {

constexpr int kMargin = 10, kGap = 4, kPageGap = 24, kTextPad = 6, kMaxLabelLines = 3;
constexpr int kFontPixels = 14;

// A QGuiApplication for fonts when the caller has none (octodiff-cli): offscreen, no display.
void ensure_gui_application() {
  if (QCoreApplication::instance()) {
    if (!qobject_cast<QGuiApplication*>(QCoreApplication::instance()))
      throw std::runtime_error("drawing a labelled sheet needs a QGuiApplication, not a QCoreApplication");
    return;
  }
  static int argc = 3;
  static char name[] = "octodiff", platform[] = "-platform", offscreen[] = "offscreen";
  static char* argv[] = {name, platform, offscreen, nullptr};
  new QGuiApplication(argc, argv);  // lives until the process ends
}

QFont label_font(bool bold = false) {
  QFont font(QStringLiteral("DejaVu Sans"));
  font.setPixelSize(kFontPixels);
  font.setBold(bold);
  return font;
}

constexpr int kWrap = Qt::TextWordWrap;  // at spaces; a longer word is clipped at the cell

// The height of `text` wrapped into `width`, at most kMaxLabelLines lines.
int wrapped_height(const QFontMetrics& fm, const std::string& text, int width) {
  const QRect r = fm.boundingRect(QRect(0, 0, std::max(width, 1), 100000), kWrap, QString::fromStdString(text));
  return std::min(r.height(), fm.lineSpacing() * kMaxLabelLines);
}

QImage to_qimage(const Image8& image, int scale) {
  const QImage out = toQImage(image);
  return scale > 1 ? out.scaled(image.width * scale, image.height * scale, Qt::IgnoreAspectRatio,
                                Qt::FastTransformation)
                   : out;
}

void check_sheet(const LabelledSheet& s) {
  if (s.columns < 1 || s.rows < 1 || s.pages < 1 ||
      s.cells.size() != static_cast<size_t>(s.columns) * s.rows * s.pages)
    throw std::invalid_argument("a labelled sheet needs columns × rows × pages cells");
  for (const Image8& c : s.cells)
    if (c.width != s.cells[0].width || c.height != s.cells[0].height || c.width < 1)
      throw std::invalid_argument("the cells of a labelled sheet must all have one size");
}

std::string label_at(const std::vector<std::string>& labels, int i) {
  return i < static_cast<int>(labels.size()) ? labels[i] : std::string();
}

}  // namespace

int SheetGeometry::cell_x(int x, int z) const {
  const int page_width = columns * cell_width + (columns - 1) * gap;
  return margin + label_width + z * (page_width + page_gap) + x * (cell_width + gap);
}

int SheetGeometry::cell_y(int y) const {
  return margin + page_label_height + header_height + y * (cell_height + gap);
}

SheetGeometry labelled_sheet_geometry(const LabelledSheet& sheet, int scale) {
  check_sheet(sheet);
  ensure_gui_application();
  scale = std::max(scale, 1);
  SheetGeometry g;
  g.margin = kMargin;
  g.gap = kGap;
  g.page_gap = kPageGap;
  g.columns = sheet.columns;
  g.cell_width = sheet.cells[0].width * scale;
  g.cell_height = sheet.cells[0].height * scale;
  const QFontMetrics fm(label_font()), bold(label_font(true));
  for (const std::string& label : sheet.column_labels)
    g.header_height = std::max(g.header_height, wrapped_height(fm, label, g.cell_width) + kTextPad);
  int widest = 0;
  for (const std::string& label : sheet.row_labels)
    widest = std::max(widest, fm.horizontalAdvance(QString::fromStdString(label)));
  if (widest > 0) g.label_width = std::min(widest, std::max(g.cell_width, 160)) + 2 * kTextPad;
  if (!sheet.page_labels.empty()) g.page_label_height = bold.lineSpacing() + 2 * kTextPad;
  const int page_width = sheet.columns * g.cell_width + (sheet.columns - 1) * g.gap;
  g.width = 2 * g.margin + g.label_width + sheet.pages * page_width + (sheet.pages - 1) * g.page_gap;
  g.height = 2 * g.margin + g.page_label_height + g.header_height + sheet.rows * g.cell_height +
             (sheet.rows - 1) * g.gap;
  return g;
}

Image8 render_labelled_sheet(const LabelledSheet& sheet, int scale) {
  const SheetGeometry g = labelled_sheet_geometry(sheet, scale);
  QImage canvas(g.width, g.height, QImage::Format_RGB888);
  canvas.fill(Qt::white);
  QPainter p(&canvas);
  p.setPen(Qt::black);
  const int page_width = sheet.columns * g.cell_width + (sheet.columns - 1) * g.gap;
  for (int z = 0; z < sheet.pages; ++z) {
    const int left = g.cell_x(0, z);
    if (g.page_label_height > 0) {
      p.setFont(label_font(true));
      p.drawText(QRect(left, g.margin, page_width, g.page_label_height), Qt::AlignCenter,
                 QString::fromStdString(label_at(sheet.page_labels, z)));
    }
    p.setFont(label_font());
    for (int x = 0; x < sheet.columns; ++x)
      p.drawText(QRect(g.cell_x(x, z), g.margin + g.page_label_height, g.cell_width, g.header_height - kTextPad / 2),
                 Qt::AlignHCenter | Qt::AlignBottom | kWrap, QString::fromStdString(label_at(sheet.column_labels, x)));
    for (int y = 0; y < sheet.rows; ++y)
      for (int x = 0; x < sheet.columns; ++x)
        p.drawImage(g.cell_x(x, z), g.cell_y(y),
                    to_qimage(sheet.cells[(static_cast<size_t>(z) * sheet.rows + y) * sheet.columns + x], scale));
  }
  p.setFont(label_font());
  for (int y = 0; y < sheet.rows; ++y)
    p.drawText(QRect(g.margin, g.cell_y(y), g.label_width - kTextPad, g.cell_height),
               Qt::AlignRight | Qt::AlignVCenter | kWrap, QString::fromStdString(label_at(sheet.row_labels, y)));
  p.end();
  return toImage8(canvas);
}

}  // namespace octodiff::gui
