// LoraListModel: the .safetensors files of a LoRA folder, each with "use it" (a check box in the
// first column, beside its name) and a strength (second column, −2…2). The view shows a spin box
// per row (LoraPanel). selection() is what the model should be loaded with.
#pragma once

#include <QAbstractTableModel>
#include <QMap>
#include <vector>

#include "pipeline/lora.h"

namespace octodiff::gui {

class LoraListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name = 0, Strength = 1, ColumnCount = 2 };
  static constexpr double kMinStrength = -2.0, kMaxStrength = 2.0, kStrengthStep = 0.05;

  struct Entry {
    QString name;  // file stem: what <lora:NAME:…> names
    QString path;
    bool enabled = false;
    double strength = 1.0;
  };

  explicit LoraListModel(QObject* parent = nullptr);

  // Lists `folder`'s *.safetensors (sorted by name); entries that were there before keep their
  // check and strength. A missing folder gives an empty list.
  void setFolder(const QString& folder);
  QString folder() const { return folder_; }
  const std::vector<Entry>& entries() const { return entries_; }
  int rowOf(const QString& name) const;  // -1 when absent
  void setEnabled(int row, bool enabled);
  void setStrength(int row, double strength);
  // The checked files with their strengths, in list order (strength 0 included: it is applied).
  std::vector<LoraSpec> selection() const;
  // "name=strength" of the checked entries (settings), and restoring from it.
  QStringList selectionText() const;
  void setSelectionText(const QStringList& items);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 signals:
  void selectionChanged();  // a check or a checked entry's strength changed

 private:
  QString folder_;
  std::vector<Entry> entries_;
};

}  // namespace octodiff::gui
