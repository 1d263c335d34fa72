// ProgressPanel: what the running job is doing — phase, overall progress with an ETA, one bar
// per device — and the switch for the live latent preview.
#pragma once

#include <QCheckBox>
#include <QGridLayout>
#include <QLabel>
#include <QProgressBar>
#include <QWidget>
#include <vector>

#include "progress_tracker.h"

namespace octodiff::gui {

class ProgressPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ProgressPanel(QWidget* parent = nullptr);

  void begin(int devices);
  void update(const ProgressTracker& tracker, double elapsedSeconds);
  void finish(const QString& message);
  bool previewEnabled() const { return preview_->isChecked(); }
  void setPreviewEnabled(bool on) { preview_->setChecked(on); }

  QProgressBar* overallBar() const { return overall_; }
  int deviceBarCount() const { return static_cast<int>(device_bars_.size()); }
  QProgressBar* deviceBar(int d) const { return device_bars_.at(d); }
  QString etaText() const { return eta_->text(); }
  QString phaseText() const { return phase_->text(); }
  QCheckBox* previewBox() const { return preview_; }

 signals:
  void previewToggled(bool on);

 private:
  QLabel *phase_, *eta_;
  QProgressBar* overall_;
  QWidget* devices_box_;
  QGridLayout* devices_grid_;
  std::vector<QProgressBar*> device_bars_;
  QCheckBox* preview_;
};

}  // namespace octodiff::gui
