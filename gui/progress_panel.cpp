#include "progress_panel.h"

#include <QHBoxLayout>
#include <QVBoxLayout>

namespace octodiff::gui {

constexpr int kBarScale = 1000;
constexpr int kDeviceColumns = 2;

ProgressPanel::ProgressPanel(QWidget* parent) : QWidget(parent) {
  phase_ = new QLabel(tr("Idle"));
  phase_->setObjectName(QStringLiteral("phaseLabel"));
  eta_ = new QLabel;
  eta_->setObjectName(QStringLiteral("etaLabel"));
  eta_->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  overall_ = new QProgressBar;
  overall_->setObjectName(QStringLiteral("overallProgress"));
  overall_->setRange(0, kBarScale);
  overall_->setValue(0);
  overall_->setFormat(QStringLiteral("%p%"));
  preview_ = new QCheckBox(tr("Live preview of the latents"));
  preview_->setObjectName(QStringLiteral("livePreview"));
  preview_->setChecked(true);
  preview_->setToolTip(tr("Show each device's latents, mapped to colours, after every step"));
  connect(preview_, &QCheckBox::toggled, this, &ProgressPanel::previewToggled);

  devices_box_ = new QWidget;
  devices_grid_ = new QGridLayout(devices_box_);
  devices_grid_->setContentsMargins(0, 0, 0, 0);
  devices_grid_->setHorizontalSpacing(8);
  devices_grid_->setVerticalSpacing(2);

  auto* head = new QHBoxLayout;
  head->addWidget(phase_, 1);
  head->addWidget(eta_);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(4);
  column->addLayout(head);
  column->addWidget(overall_);
  column->addWidget(devices_box_);
  column->addWidget(preview_);
}

void ProgressPanel::begin(int devices) {
  if (static_cast<int>(device_bars_.size()) != devices) {
    device_bars_.clear();
    while (QLayoutItem* item = devices_grid_->takeAt(0)) {
      if (item->widget()) item->widget()->deleteLater();
      delete item;
    }
    for (int d = 0; d < devices; ++d) {
      auto* bar = new QProgressBar;
      bar->setRange(0, kBarScale);
      bar->setTextVisible(true);
      bar->setFormat(tr("device %1: %p%").arg(d + 1));
      bar->setMaximumHeight(bar->fontMetrics().height() + 4);
      devices_grid_->addWidget(bar, d / kDeviceColumns, d % kDeviceColumns);
      device_bars_.push_back(bar);
    }
  }
  for (QProgressBar* b : device_bars_) b->setValue(0);
}

void ProgressPanel::update(const ProgressTracker& t, double elapsed) {
  if (t.devices() != deviceBarCount()) begin(t.devices());
  phase_->setText(t.phaseText());
  overall_->setValue(static_cast<int>(t.overallFraction() * kBarScale));
  for (int d = 0; d < deviceBarCount(); ++d)
    device_bars_[d]->setValue(static_cast<int>(t.deviceFraction(d) * kBarScale));
  const auto eta = t.etaSeconds(elapsed);
  eta_->setText(eta ? tr("%1 elapsed · about %2 left").arg(formatDuration(elapsed), formatDuration(*eta))
                    : tr("%1 elapsed").arg(formatDuration(elapsed)));
}

void ProgressPanel::finish(const QString& message) {
  phase_->setText(message);
  eta_->clear();
}

}  // namespace octodiff::gui
