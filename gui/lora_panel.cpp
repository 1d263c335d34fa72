#include "lora_panel.h"

#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QVBoxLayout>

namespace octodiff::gui {

QWidget* LoraStrengthDelegate::createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex&) const {
  auto* box = new QDoubleSpinBox(parent);
  box->setObjectName(QStringLiteral("loraStrength"));
  box->setRange(LoraListModel::kMinStrength, LoraListModel::kMaxStrength);
  box->setSingleStep(LoraListModel::kStrengthStep);
  box->setDecimals(2);
  box->setFrame(false);
  connect(box, &QDoubleSpinBox::valueChanged, this, [this, box] {
    emit const_cast<LoraStrengthDelegate*>(this)->commitData(box);
  });
  return box;
}

void LoraStrengthDelegate::setEditorData(QWidget* editor, const QModelIndex& index) const {
  auto* box = static_cast<QDoubleSpinBox*>(editor);
  const double v = index.data(Qt::EditRole).toDouble();
  if (box->value() != v) box->setValue(v);
}

void LoraStrengthDelegate::setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const {
  model->setData(index, static_cast<QDoubleSpinBox*>(editor)->value(), Qt::EditRole);
}

LoraPanel::LoraPanel(QWidget* parent) : QWidget(parent) {
  model_ = new LoraListModel(this);
  folder_edit_ = new QLineEdit;
  folder_edit_->setObjectName(QStringLiteral("loraFolder"));
  folder_edit_->setPlaceholderText(tr("LoRA folder (.safetensors)"));
  auto* browse = new QPushButton(tr("Folder…"));
  browse->setObjectName(QStringLiteral("loraBrowse"));
  connect(browse, &QPushButton::clicked, this, &LoraPanel::browse);
  connect(folder_edit_, &QLineEdit::editingFinished, this, [this] {
    if (folder_edit_->text() == folder()) return;
    setFolder(folder_edit_->text());
    emit folderChosen(folder());
  });
  auto* row = new QHBoxLayout;
  row->addWidget(folder_edit_, 1);
  row->addWidget(browse);

  view_ = new QTableView;
  view_->setObjectName(QStringLiteral("loraList"));
  view_->setModel(model_);
  view_->setItemDelegateForColumn(LoraListModel::Strength, new LoraStrengthDelegate(view_));
  view_->verticalHeader()->hide();
  view_->horizontalHeader()->setSectionResizeMode(LoraListModel::Name, QHeaderView::Stretch);
  view_->horizontalHeader()->setSectionResizeMode(LoraListModel::Strength, QHeaderView::Fixed);
  view_->horizontalHeader()->resizeSection(LoraListModel::Strength, 80);
  view_->setSelectionMode(QAbstractItemView::NoSelection);
  view_->setMaximumHeight(110);
  connect(model_, &QAbstractItemModel::modelReset, this, &LoraPanel::openEditors);
  connect(model_, &LoraListModel::selectionChanged, this, &LoraPanel::selectionChanged);

  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("loraStatus"));
  status_->setWordWrap(true);
  status_->setText(tr("Check LoRAs to merge them, or write <lora:NAME:0.8> in a prompt."));
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(4);
  column->addLayout(row);
  column->addWidget(view_);
  column->addWidget(status_);
}

void LoraPanel::setFolder(const QString& folder) {
  folder_edit_->setText(folder);
  model_->setFolder(folder);
}

void LoraPanel::setStatus(const QString& text) {
  status_->setText(text);
}

void LoraPanel::browse() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("LoRA folder"), folder());
  if (dir.isEmpty()) return;
  setFolder(dir);
  emit folderChosen(dir);
}

void LoraPanel::openEditors() {
  for (int r = 0; r < model_->rowCount(); ++r) view_->openPersistentEditor(model_->index(r, LoraListModel::Strength));
}

}  // namespace octodiff::gui
