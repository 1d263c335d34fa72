// RunHistoryModel: one table row per pipeline run since the app started, with its timings —
// compile (first run of a signature) versus cached runs, and the inference breakdown.
#pragma once

#include <QAbstractTableModel>
#include <QDateTime>
#include <vector>

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
    int images = 0, model_calls = 0;
    QString signature;
    bool compiled = false;
    Timings timings;
  };

  using QAbstractTableModel::QAbstractTableModel;

  void addRun(const RunRecord& run);
  const Row& row(int i) const { return rows_.at(i); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<Row> rows_;
};

}  // namespace octodiff::gui
