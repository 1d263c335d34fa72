// The labelled comparison sheet as one picture: the cells in a grid with the X values above the
// columns, the Y values left of the rows and, for a Z axis, one grid per Z value side by side
// under its value — text drawn with Qt (QPainter on a QImage).
//
// Its own small library (octodiff_sheet_render: QtGui only, no widgets) so that octodiff-cli can
// write the same PNG as the app; the interface takes and returns engine images, no Qt types.
// Without a Q(Gui)Application it makes one on the "offscreen" platform (no display needed), so
// the first call must come from the thread that will own it (the CLI's main thread).
#pragma once

#include <string>
#include <vector>

#include "io/image.h"

namespace octodiff::gui {

struct LabelledSheet {
  int columns = 1, rows = 1, pages = 1;  // X, Y, Z sizes
  std::vector<Image8> cells;             // cell (x, y, z) at (z·rows + y)·columns + x, all one size
  std::vector<std::string> column_labels, row_labels, page_labels;  // X, Y, Z values (may be empty)
};

// Where the parts of a rendered sheet are, in its pixels.
struct SheetGeometry {
  int width = 0, height = 0;
  int cell_width = 0, cell_height = 0;  // the cells as drawn (image × scale)
  int label_width = 0;                  // the row labels' column
  int header_height = 0;                // the column labels' row (below a page label)
  // The top-left pixel of cell (x, y, z).
  int cell_x(int x, int z) const;
  int cell_y(int y) const;
  int gap = 0, page_gap = 0, margin = 0, page_label_height = 0, columns = 1;
};

// `scale` > 1 enlarges every cell (nearest neighbour) — for small models' 64×64 images.
SheetGeometry labelled_sheet_geometry(const LabelledSheet& sheet, int scale = 1);
Image8 render_labelled_sheet(const LabelledSheet& sheet, int scale = 1);

}  // namespace octodiff::gui
