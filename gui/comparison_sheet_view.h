// ComparisonSheetView: the X/Y(/Z) comparison sheet (pipeline/comparison_sheet.h) — three axis
// pickers (a setting and its values), the cells in a grid with the X values above the columns,
// the Y values left of the rows and one grid per Z value, each cell as large as its image (small
// images enlarged by whole factors), and export as one labelled PNG (sheet_render.h) or as
// single PNGs with the metadata of the single run each cell equals. A click on a cell opens it in
// the image dialog as that single run (sheet_runs.h); a finished sheet can be shown again (from
// the run history).
#pragma once

#include <QComboBox>
#include <QGridLayout>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QWidget>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/comparison_sheet.h"
#include "run_record.h"

namespace octodiff::gui {

class ComparisonSheetView : public QWidget {
  Q_OBJECT
 public:
  explicit ComparisonSheetView(QWidget* parent = nullptr);

  // An axis as "NAME=V1,V2,…" (0: X, 1: Y, 2: Z); empty when the axis is off.
  QString axisText(int axis) const;
  void setAxisText(int axis, const QString& text);
  // The pickers as a sheet; nullopt and *error when they do not parse.
  std::optional<SheetSpec> spec(QString* error) const;
  void setRunEnabled(bool enabled) { run_->setEnabled(enabled); }
  QPushButton* runButton() const { return run_; }

  // A sheet begins: its labels and one empty cell per cell.
  void beginSheet(const SheetPlan& plan);
  // A run of it finished: device d of `run` made cell cells[d].
  void showRun(const std::vector<int>& cells, const RunPtr& run);
  // Cells' images without their runs (cells[i] ↔ images[i]).
  void showCells(const std::vector<int>& cells, const std::vector<QImage>& images);
  // The whole sheet is done: export becomes possible.
  void showResult(const std::shared_ptr<const SheetResult>& result);
  void markStopped(const QString& message);
  const std::shared_ptr<const SheetResult>& result() const { return result_; }
  // A finished sheet again, whole (e.g. reopened from the run history).
  void showSheet(const std::shared_ptr<const SheetResult>& sheet);
  // The numbers of the runs shown (RunRecord::number; 0 for a reopened sheet's).
  std::vector<int> runNumbers() const;
  // The single run cell `cell` equals, once its image is in; null before.
  RunPtr cellRun(int cell) const;
  // "guidance 7.5 · seed 2": the cell's values on the sheet's axes.
  QString cellLabel(int cell) const;
  // Asks for the cell in the image dialog (what a click on it does); nothing before its image is in.
  void enlargeCell(int cell);

  // The labelled sheet (the CLI's picture) of the finished sheet; null before one finished.
  QImage labelledSheet() const;
  bool exportSheet(const QString& path, QString* error) const;
  bool exportCells(const QString& folder, QString* error) const;

  // What the grid shows (for tests): the labels as drawn, the cells' widgets.
  QStringList columnLabels() const;
  QStringList rowLabels() const;
  QStringList pageLabels() const;
  QLabel* cell(int index) const { return cells_.at(index); }
  int cellCount() const { return static_cast<int>(cells_.size()); }

 signals:
  void runRequested(const octodiff::SheetSpec& spec);
  void errorOccurred(const QString& message);
  void cellEnlargeRequested(const octodiff::gui::RunPtr& run, const QString& title);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void requestRun();
  void saveSheetDialog();
  void saveCellsDialog();
  void clearGrid();
  QLabel* addLabel(QGridLayout* grid, const QString& text, const QString& objectName, int row, int column);

  QComboBox* names_[3];
  QLineEdit* values_[3];
  QPushButton* run_;
  QPushButton* save_sheet_;
  QPushButton* save_cells_;
  QLabel* status_;
  QScrollArea* scroll_;
  QWidget* pages_;
  std::vector<QLabel*> cells_;
  std::vector<RunPtr> cell_runs_;  // per cell: the single run it equals (null until its image is in)
  std::vector<RunPtr> runs_;       // the sheet's runs shown, in the order they finished
  std::vector<QLabel*> column_labels_, row_labels_, page_labels_;
  std::optional<SheetPlan> plan_;
  std::shared_ptr<const SheetResult> result_;
};

}  // namespace octodiff::gui
