// ImageDialog: one image enlarged — by a whole factor with nearest-neighbour pixels by default
// (demo images are 64–128 px), or smoothly — with its settings and the per-image actions.
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QLabel>

#include "run_record.h"

namespace octodiff::gui {

class ImageDialog : public QDialog {
  Q_OBJECT
 public:
  ImageDialog(const RunPtr& run, int index, QWidget* parent = nullptr);

  int zoom() const;  // current scale factor (1, 2, 3, …)
  bool smooth() const { return smooth_->isChecked(); }
  void setZoom(int factor);
  void setSmooth(bool smooth) { smooth_->setChecked(smooth); }
  QSize shownSize() const;  // size of the scaled image on screen
  static int fittingZoom(const QSize& image, const QSize& room);

 signals:
  void saveRequested(const octodiff::gui::RunPtr& run, int index);
  void copyRequested(const octodiff::gui::RunPtr& run, int index);
  void reuseRequested(const octodiff::gui::RunPtr& run, int index);
  void varyRequested(const octodiff::gui::RunPtr& run, int index);

 private:
  void render();

  RunPtr run_;
  int index_;
  QLabel* picture_;
  QComboBox* zoom_;
  QCheckBox* smooth_;
};

}  // namespace octodiff::gui
