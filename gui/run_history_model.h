// RunHistoryModel: one table row per pipeline run since the app started, with its timings —
// compile (first run of a signature) versus cached runs, and the inference breakdown. A finished
// comparison sheet's runs keep the sheet (the last kKeptSheets sheets), so it can be reopened.
#pragma once

#include <QAbstractTableModel>
#include <QDateTime>
#include <memory>
#include <vector>

#include "pipeline/comparison_sheet.h"
#include "run_record.h"

namespace octodiff::gui {

class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Number,
    Kind,
    Seed,
    Images,
    Plan,
    Compile,
    TextEncode,
    Denoise,
    PerStep,
    Decode,
    Inference,
    Total,
    Time,
    Signature,
    ColumnCount
  };
  struct Row {
    int number = 0;
    QDateTime time;
    JobKind kind = JobKind::Generate;
    int64_t seed = 0;
    int index_in_job = 0, runs_in_job = 1;
    int images = 0, model_calls = 0;
    QString signature;
    bool compiled = false;
    Timings timings;
    std::shared_ptr<const SheetResult> sheet;  // a finished sheet's run (null when not kept)
    bool sheet_dropped = false;                // it was kept, then let go for newer ones
  };
  static constexpr int kKeptSheets = 8;  // finished sheets kept for reopening (their images and latents)

  using QAbstractTableModel::QAbstractTableModel;

  void addRun(const RunRecord& run);
  const Row& row(int i) const { return rows_.at(i); }
  // The runs numbered `numbers` made `sheet` (which finished): their rows reopen it.
  void attachSheet(const std::vector<int>& numbers, const std::shared_ptr<const SheetResult>& sheet);
  // The sheet row `i` reopens; null when it is no sheet's run, did not finish, or was let go.
  std::shared_ptr<const SheetResult> sheetAt(int i) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<Row> rows_;
  std::vector<std::shared_ptr<const SheetResult>> kept_sheets_;  // oldest first
};

}  // namespace octodiff::gui
