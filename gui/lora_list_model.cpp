#include "lora_list_model.h"

#include <QDir>
#include <QFileInfo>
#include <cmath>

namespace octodiff::gui {

LoraListModel::LoraListModel(QObject* parent) : QAbstractTableModel(parent) {}

void LoraListModel::setFolder(const QString& folder) {
  QMap<QString, Entry> previous;
  for (const Entry& e : entries_) previous.insert(e.name, e);
  const bool had_selection = !selection().empty();
  beginResetModel();
  folder_ = folder;
  entries_.clear();
  if (!folder.isEmpty()) {
    const QDir dir(folder);
    for (const QFileInfo& f : dir.entryInfoList({QStringLiteral("*.safetensors")}, QDir::Files, QDir::Name)) {
      Entry e{f.completeBaseName(), f.absoluteFilePath()};
      if (auto it = previous.constFind(e.name); it != previous.constEnd()) {
        e.enabled = it->enabled;
        e.strength = it->strength;
      }
      entries_.push_back(e);
    }
  }
  endResetModel();
  if (had_selection || !selection().empty()) emit selectionChanged();
}

int LoraListModel::rowOf(const QString& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

void LoraListModel::setEnabled(int row, bool enabled) {
  setData(index(row, Name), enabled ? Qt::Checked : Qt::Unchecked, Qt::CheckStateRole);
}

void LoraListModel::setStrength(int row, double strength) {
  setData(index(row, Strength), strength, Qt::EditRole);
}

std::vector<LoraSpec> LoraListModel::selection() const {
  std::vector<LoraSpec> specs;
  for (const Entry& e : entries_)
    if (e.enabled) specs.push_back({e.path.toStdString(), static_cast<float>(e.strength)});
  return specs;
}

QStringList LoraListModel::selectionText() const {
  QStringList items;
  for (const Entry& e : entries_)
    if (e.enabled) items << QStringLiteral("%1=%2").arg(e.name).arg(e.strength);
  return items;
}

void LoraListModel::setSelectionText(const QStringList& items) {
  for (size_t r = 0; r < entries_.size(); ++r) setEnabled(static_cast<int>(r), false);
  for (const QString& item : items) {
    const int eq = item.lastIndexOf('=');
    const int row = rowOf(eq < 0 ? item : item.left(eq));
    if (row < 0) continue;
    bool ok = false;
    const double s = eq < 0 ? 1.0 : item.mid(eq + 1).toDouble(&ok);
    setStrength(row, ok || eq < 0 ? s : 1.0);
    setEnabled(row, true);
  }
}

int LoraListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(entries_.size());
}

int LoraListModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant LoraListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const Entry& e = entries_[index.row()];
  if (index.column() == Name) {
    if (role == Qt::DisplayRole) return e.name;
    if (role == Qt::CheckStateRole) return e.enabled ? Qt::Checked : Qt::Unchecked;
    if (role == Qt::ToolTipRole) return e.path;
  } else if (index.column() == Strength) {
    if (role == Qt::DisplayRole || role == Qt::EditRole) return e.strength;
  }
  return {};
}

bool LoraListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || index.row() >= rowCount()) return false;
  Entry& e = entries_[index.row()];
  if (index.column() == Name && role == Qt::CheckStateRole) {
    const bool enabled = value.toInt() == Qt::Checked;
    if (enabled == e.enabled) return true;
    e.enabled = enabled;
  } else if (index.column() == Strength && role == Qt::EditRole) {
    bool ok = false;
    const double s = std::clamp(value.toDouble(&ok), kMinStrength, kMaxStrength);
    if (!ok || !std::isfinite(s)) return false;
    if (s == e.strength) return true;
    e.strength = s;
  } else {
    return false;
  }
  emit dataChanged(index, index, {role});
  if (e.enabled || index.column() == Name) emit selectionChanged();
  return true;
}

Qt::ItemFlags LoraListModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.column() == Name) f |= Qt::ItemIsUserCheckable;
  if (index.column() == Strength) f |= Qt::ItemIsEditable;
  return f;
}

QVariant LoraListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == Name ? tr("LoRA") : tr("Strength");
}

}  // namespace octodiff::gui
