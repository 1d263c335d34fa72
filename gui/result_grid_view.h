// ResultGridView: the images of one run as a grid (2×4 for eight, fewer adapt — the engine's
// grid_shape), each tile labelled with its prompt and seed/device. While the run is going the
// tiles show the live preview of each device's latents; clicking a finished tile enlarges it.
// The tiles share the room the view gets, or — sized to their images (the seed comparison's
// columns) — are as large as their images (small ones enlarged by a whole factor to at least
// kSmallestShownSide, large ones shrunk to kLargestShownSide), packed at the top left.
#pragma once

#include <QGridLayout>
#include <QLabel>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "image_tile.h"
#include "run_record.h"

namespace octodiff::gui {

class ResultGridView : public QWidget {
  Q_OBJECT
 public:
  explicit ResultGridView(QWidget* parent = nullptr);

  // Placeholder tiles for a run that is starting: `prompts` one per image (device-major).
  void beginRun(const QStringList& prompts, int devices, int batch, int64_t seed);
  // The latent preview of `device`'s first image after `step` of `steps` steps.
  void showPreview(int device, int step, int steps, const QImage& image);
  // The finished run: its images replace the placeholders.
  void showRun(const RunPtr& run);
  void clear(const QString& message = {});
  // The run ended without images (cancelled or failed): the placeholders say so.
  void markStopped(const QString& message);
  void setTitle(const QString& title);  // shown above the grid when not empty
  static constexpr int kSmallestShownSide = 128, kLargestShownSide = 256;
  void setTilesSizedToImages(bool sized);
  // The picture's size in a tile sized to an image of `image` pixels.
  static QSize shownSize(const QSize& image);
  QString title() const { return title_->text(); }

  RunPtr run() const { return run_; }
  int tileCount() const { return static_cast<int>(tiles_.size()); }
  ImageTile* tile(int i) const { return tiles_.at(i); }
  int rows() const { return rows_; }
  int columns() const { return cols_; }

 signals:
  void enlargeRequested(const octodiff::gui::RunPtr& run, int index);
  void saveRequested(const octodiff::gui::RunPtr& run, int index);
  void copyRequested(const octodiff::gui::RunPtr& run, int index);
  void reuseRequested(const octodiff::gui::RunPtr& run, int index);
  void varyRequested(const octodiff::gui::RunPtr& run, int index);

 private:
  void rebuild(int count);
  void sizeTiles(const QSize& image);  // sized mode: every tile's picture for images of that size
  static QString detail(int64_t seed, int index, int devices, int batch);

  QLabel* title_;
  QLabel* empty_;
  QWidget* tiles_area_;
  QGridLayout* grid_;
  std::vector<ImageTile*> tiles_;
  RunPtr run_;
  int devices_ = 1, batch_ = 1, rows_ = 0, cols_ = 0;
  bool sized_ = false;
  QSize image_size_{64, 64};  // sized mode: the last run's images (placeholders take their size)
};

}  // namespace octodiff::gui
