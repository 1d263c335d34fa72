// TimingsPanel: where the time went. For the last run: compile (first run of a new signature) or
// cached plan, and the inference breakdown (text encoding, denoising per step, decoding); below,
// the history of every run since the app started (RunHistoryModel in a table; double-clicking a
// finished comparison sheet's run asks for the sheet again).
#pragma once

#include <QLabel>
#include <QTableView>
#include <QWidget>

#include "run_history_model.h"
#include "timing_chart.h"

namespace octodiff::gui {

class TimingsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit TimingsPanel(QWidget* parent = nullptr);

  void addRun(const RunRecord& run);
  RunHistoryModel* history() const { return model_; }
  QTableView* table() const { return table_; }
  QString planText() const { return plan_->text(); }  // "compiled …" or "cached …"
  QString breakdownText() const { return breakdown_->text(); }

 signals:
  void sheetReopenRequested(const std::shared_ptr<const octodiff::SheetResult>& sheet);

 private:
  RunHistoryModel* model_;
  QTableView* table_;
  QLabel *plan_, *breakdown_;
  TimingChart* chart_;
};

}  // namespace octodiff::gui
