// SeedComparisonView: the same prompts with several seeds, one grid per seed side by side with
// the seed above it; or a seed sweep — one prompt, one image per seed, in a row. Each seed is one
// pipeline run on the worker; runs after the first reuse the compiled plan. The tiles are sized to
// their images (ResultGridView::setTilesSizedToImages), the columns packed from the left.
#pragma once

#include <QComboBox>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QWidget>
#include <optional>
#include <vector>

#include "result_grid_view.h"

namespace octodiff::gui {

class SeedComparisonView : public QWidget {
  Q_OBJECT
 public:
  explicit SeedComparisonView(QWidget* parent = nullptr);

  // "1, 2, 7" and ranges "10-13"; nullopt (and `error`) for anything else or fewer than two seeds.
  static std::optional<std::vector<int64_t>> parseSeeds(const QString& text, QString* error);

  JobKind mode() const;
  void setMode(JobKind kind);
  QString seedsText() const { return seeds_->text(); }
  void setSeedsText(const QString& text) { seeds_->setText(text); }
  void setRunEnabled(bool enabled) { run_->setEnabled(enabled); }

  // A job of len(seeds) runs begins: one empty column per seed.
  void beginJob(JobKind kind, const std::vector<int64_t>& seeds);
  void beginRun(int index, const QStringList& prompts, int devices, int batch);
  void showPreview(int device, int step, int steps, const QImage& image);
  void addRun(const RunPtr& run);
  void markStopped(const QString& message);

  int columnCount() const { return static_cast<int>(columns_.size()); }
  ResultGridView* column(int i) const { return columns_.at(i); }
  QPushButton* runButton() const { return run_; }

 signals:
  void runRequested(octodiff::gui::JobKind kind, const std::vector<int64_t>& seeds);
  void errorOccurred(const QString& message);
  // Per-image actions, as ResultGridView's.
  void enlargeRequested(const octodiff::gui::RunPtr& run, int index);
  void saveRequested(const octodiff::gui::RunPtr& run, int index);
  void copyRequested(const octodiff::gui::RunPtr& run, int index);
  void reuseRequested(const octodiff::gui::RunPtr& run, int index);
  void varyRequested(const octodiff::gui::RunPtr& run, int index);
  void saveGridRequested(const octodiff::gui::RunPtr& run);

 private:
  void requestRun();

  QComboBox* mode_;
  QLineEdit* seeds_;
  QPushButton* run_;
  QScrollArea* scroll_;
  QWidget* strip_;
  QHBoxLayout* strip_layout_;
  std::vector<ResultGridView*> columns_;
  std::vector<int64_t> seeds_list_;
  JobKind job_kind_ = JobKind::SeedComparison;
  int active_ = -1;
};

}  // namespace octodiff::gui
