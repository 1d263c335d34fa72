// LoraPanel: a LoRA folder (chosen once, remembered by the window's settings) and its
// .safetensors files in a table (LoraListModel): a check box per file and a strength spin box
// (−2…2, step 0.05). The same folder resolves the prompts' <lora:NAME:STRENGTH> tags.
// The panel only describes the wanted LoRAs; the window loads the model with them (off the UI
// thread) before the next run, and right away when idle.
#pragma once

#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QWidget>

#include "lora_list_model.h"

namespace octodiff::gui {

// The strength column's editor: a QDoubleSpinBox that writes every change to the model at once.
class LoraStrengthDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  void setEditorData(QWidget* editor, const QModelIndex& index) const override;
  void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override;
};

class LoraPanel : public QWidget {
  Q_OBJECT
 public:
  explicit LoraPanel(QWidget* parent = nullptr);

  QString folder() const { return model_->folder(); }
  void setFolder(const QString& folder);  // lists its files (keeps checks of files still there)
  void rescan() { setFolder(folder()); }
  std::vector<LoraSpec> selection() const { return model_->selection(); }
  LoraListModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  void setStatus(const QString& text);
  QString status() const { return status_->text(); }

 signals:
  void folderChosen(const QString& folder);  // by the user (browse or typed)
  void selectionChanged();

 private:
  void browse();
  void openEditors();

  LoraListModel* model_;
  QLineEdit* folder_edit_;
  QTableView* view_;
  QLabel* status_;
};

}  // namespace octodiff::gui
