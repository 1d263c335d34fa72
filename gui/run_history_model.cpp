#include "run_history_model.h"

#include <QBrush>
#include <QColor>
#include <algorithm>

#include "progress_tracker.h"

namespace octodiff::gui {

void RunHistoryModel::addRun(const RunRecord& run) {
  Row r;
  r.number = run.number;
  r.time = run.finished_at;
  r.kind = run.kind;
  r.seed = run.seed();
  r.index_in_job = run.index_in_job;
  r.runs_in_job = run.runs_in_job;
  r.images = run.imageCount();
  r.model_calls = run.result.model_calls;
  r.signature = QString::fromStdString(run.result.signature.str());
  r.compiled = run.result.compiled;
  r.timings = run.result.timings;
  const int at = static_cast<int>(rows_.size());
  beginInsertRows({}, at, at);
  rows_.push_back(r);
  endInsertRows();
}

void RunHistoryModel::attachSheet(const std::vector<int>& numbers, const std::shared_ptr<const SheetResult>& sheet) {
  if (!sheet) return;
  kept_sheets_.push_back(sheet);
  std::shared_ptr<const SheetResult> dropped;
  if (static_cast<int>(kept_sheets_.size()) > kKeptSheets) {
    dropped = kept_sheets_.front();
    kept_sheets_.erase(kept_sheets_.begin());
  }
  for (int i = 0; i < rowCount(); ++i) {
    Row& r = rows_[i];
    const bool mine = std::find(numbers.begin(), numbers.end(), r.number) != numbers.end();
    if (mine) r.sheet = sheet;
    if (dropped && r.sheet == dropped) {
      r.sheet.reset();
      r.sheet_dropped = true;
    }
    if (mine || r.sheet_dropped) emit dataChanged(index(i, 0), index(i, ColumnCount - 1));
  }
}

std::shared_ptr<const SheetResult> RunHistoryModel::sheetAt(int i) const {
  return i >= 0 && i < rowCount() ? rows_[i].sheet : nullptr;
}

int RunHistoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int RunHistoryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const Row& r = rows_[index.row()];
  const Timings& t = r.timings;
  if (role == Qt::TextAlignmentRole)
    return (index.column() >= Compile && index.column() <= Total) || index.column() == Number ||
                   index.column() == Seed || index.column() == Images
               ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
               : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  if (role == Qt::ForegroundRole && index.column() == Plan)
    return QBrush(r.compiled ? QColor(176, 96, 0) : QColor(0, 128, 64));
  if (role == Qt::ToolTipRole && index.column() == Kind && r.kind == JobKind::Sheet)
    return r.sheet           ? tr("Double-click to show this comparison sheet again")
           : r.sheet_dropped ? tr("Only the last %1 sheets are kept to be shown again").arg(kKeptSheets)
                             : tr("This comparison sheet did not finish");
  if (role == Qt::ToolTipRole && index.column() == Plan)
    return r.compiled ? tr("First run of this signature: the plan was compiled, then run")
                      : tr("The plan of this signature came from the cache: no compile");
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Number:
      return r.number;
    case Time:
      return r.time.toString(QStringLiteral("HH:mm:ss"));
    case Kind:
      return r.kind == JobKind::Sheet ? tr("Sheet %1/%2").arg(r.index_in_job + 1).arg(r.runs_in_job) : jobKindName(r.kind);
    case Seed:
      return QString::number(r.seed);
    case Images:
      return r.images;
    case Signature:
      return r.signature;
    case Plan:
      return r.compiled ? tr("compiled") : tr("cached");
    case Compile:
      return r.compiled ? formatDuration(t.compile) : QStringLiteral("—");
    case TextEncode:
      return formatDuration(t.text_encode);
    case Denoise:
      return formatDuration(t.denoise);
    case PerStep:
      return formatDuration(t.mean_step);
    case Decode:
      return formatDuration(t.decode);
    case Inference:
      return formatDuration(t.total - t.compile);
    case Total:
      return formatDuration(t.total);
  }
  return {};
}

QVariant RunHistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case Compile:
        return tr("Building the plan of a new signature (like a JAX jit trace); 0 when cached");
      case Denoise:
        return tr("All UNet steps of all devices, wall clock");
      case PerStep:
        return tr("One UNet call + scheduler step on one device, averaged");
      case Inference:
        return tr("Total minus compile");
      default:
        return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  static const char* names[] = {"#",         "Kind",        "Seed",    "Images",   "Plan",
                                "Compile",   "Text encode", "Denoise", "Per step", "Decode",
                                "Inference", "Total",       "Time",    "Signature"};
  return section >= 0 && section < ColumnCount ? tr(names[section]) : QVariant();
}

}  // namespace octodiff::gui
