#include "timing_chart.h"

#include <QPainter>
#include <algorithm>

namespace octodiff::gui {

TimingChart::TimingChart(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void TimingChart::setTimings(const Timings& timings, bool compiled) {
  timings_ = timings;
  compiled_ = compiled;
  has_ = true;
  update();
}

void TimingChart::clear() {
  has_ = false;
  update();
}

void TimingChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  const QRect area = rect().adjusted(1, 1, -1, -1);
  const QColor dim = palette().color(QPalette::Mid);
  if (!has_) {
    p.setPen(dim);
    p.drawText(area, Qt::AlignCenter, tr("timings appear after the first run"));
    return;
  }
  // Stacked bar: the parts of the total.
  const int bar_h = 18;
  const Timings& t = timings_;
  const double parts[] = {t.compile, t.text_encode, t.denoise, t.decode};
  const QColor colors[] = {compileColor(), textColor(), denoiseColor(), decodeColor()};
  double sum = 0;
  for (double v : parts) sum += std::max(0.0, v);
  double x = area.left();
  const double scale = sum > 0 ? area.width() / sum : 0;
  for (int i = 0; i < 4; ++i) {
    const double w = std::max(0.0, parts[i]) * scale;
    if (w <= 0) continue;
    p.fillRect(QRectF(x, area.top(), std::max(1.0, w), bar_h), colors[i]);
    x += w;
  }
  p.setPen(dim);
  p.drawRect(QRect(area.left(), area.top(), area.width() - 1, bar_h));

  // One bar per step; the first steps include warm-up (allocations, caches).
  const int top = area.top() + bar_h + 14;
  const QRect steps(area.left(), top, area.width(), area.bottom() - top);
  p.setPen(palette().color(QPalette::WindowText));
  p.drawText(QRect(area.left(), area.top() + bar_h, area.width(), 14), Qt::AlignLeft | Qt::AlignVCenter,
             tr("seconds per step (%1 steps)").arg(t.step.size()));
  if (t.step.empty() || steps.height() < 4) return;
  const double peak = *std::max_element(t.step.begin(), t.step.end());
  const double w = static_cast<double>(steps.width()) / t.step.size();
  for (size_t i = 0; i < t.step.size(); ++i) {
    const double h = peak > 0 ? t.step[i] / peak * steps.height() : 0;
    p.fillRect(QRectF(steps.left() + i * w, steps.bottom() - h, std::max(1.0, w - (w > 3 ? 1 : 0)), h),
               denoiseColor());
  }
}

}  // namespace octodiff::gui
