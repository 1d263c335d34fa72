// TimingChart: one run's time at a glance — a stacked bar (compile | text encoding | denoising |
// decoding) and below it one bar per denoising step (mean over devices).
#pragma once

#include <QWidget>

#include "pipeline/generation.h"

namespace octodiff::gui {

class TimingChart : public QWidget {
  Q_OBJECT
 public:
  explicit TimingChart(QWidget* parent = nullptr);
  void setTimings(const Timings& timings, bool compiled);
  void clear();
  QSize sizeHint() const override { return {360, 110}; }
  QSize minimumSizeHint() const override { return {200, 90}; }

  static QColor compileColor() { return {230, 140, 30}; }
  static QColor textColor() { return {120, 90, 200}; }
  static QColor denoiseColor() { return {40, 130, 200}; }
  static QColor decodeColor() { return {60, 170, 110}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  Timings timings_;
  bool compiled_ = false, has_ = false;
};

}  // namespace octodiff::gui
