#include "model_chooser.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>

#include "progress_tracker.h"

namespace octodiff::gui {

ModelChooser::ModelChooser(QWidget* parent) : QWidget(parent) {
  path_ = new QComboBox;
  path_->setObjectName(QStringLiteral("modelPath"));
  path_->setEditable(true);
  path_->setInsertPolicy(QComboBox::NoInsert);
  path_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  path_->setMinimumContentsLength(18);
  path_->setToolTip(tr("A diffusers model folder or a single-file .safetensors checkpoint"));
  folder_button_ = new QPushButton(tr("Folder…"));
  file_button_ = new QPushButton(tr("File…"));
  load_ = new QPushButton(tr("Load"));
  load_->setObjectName(QStringLiteral("loadModel"));
  tokenizer_ = new QLineEdit;
  tokenizer_->setObjectName(QStringLiteral("tokenizerDir"));
  tokenizer_->setPlaceholderText(tr("tokenizer folder (single files only)"));
  tokenizer_->setClearButtonEnabled(true);
  tokenizer_button_ = new QPushButton(tr("…"));
  tokenizer_button_->setMaximumWidth(32);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("modelStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setVerticalSpacing(4);
  grid->addWidget(path_, 0, 0, 1, 3);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(folder_button_);
  buttons->addWidget(file_button_);
  buttons->addStretch(1);
  buttons->addWidget(load_);
  grid->addLayout(buttons, 1, 0, 1, 3);
  grid->addWidget(tokenizer_, 2, 0, 1, 2);
  grid->addWidget(tokenizer_button_, 2, 2);
  grid->addWidget(status_, 3, 0, 1, 3);
  grid->setColumnStretch(0, 1);

  connect(folder_button_, &QPushButton::clicked, this, &ModelChooser::browseFolder);
  connect(file_button_, &QPushButton::clicked, this, &ModelChooser::browseFile);
  connect(tokenizer_button_, &QPushButton::clicked, this, &ModelChooser::browseTokenizer);
  connect(load_, &QPushButton::clicked, this, [this] { emit loadRequested(path(), tokenizerDir()); });
  connect(path_, &QComboBox::currentTextChanged, this, &ModelChooser::updateTokenizerEnabled);
  connect(path_->lineEdit(), &QLineEdit::returnPressed, this,
          [this] { emit loadRequested(path(), tokenizerDir()); });
  updateTokenizerEnabled();
}

QString ModelChooser::path() const {
  return path_->currentText().trimmed();
}

void ModelChooser::setPath(const QString& path) {
  const int i = path_->findText(path);
  if (i >= 0) {
    path_->setCurrentIndex(i);
  } else {
    path_->insertItem(0, path);
    path_->setCurrentIndex(0);
  }
  path_->setToolTip(path);
}

void ModelChooser::setRecent(const QStringList& paths) {
  const QString current = path();
  path_->clear();
  path_->addItems(paths);
  if (!current.isEmpty()) setPath(current);
}

void ModelChooser::showLoading(const QString& path) {
  status_->setStyleSheet(QString());
  status_->setText(tr("Loading %1 …").arg(QFileInfo(path).fileName()));
}

void ModelChooser::showLoaded(const QString& label, const QString& description, double seconds) {
  status_->setStyleSheet(QString());
  status_->setText(tr("<b>%1</b><br>%2 · loaded in %3")
                       .arg(label.toHtmlEscaped(), description.toHtmlEscaped(), formatDuration(seconds)));
}

void ModelChooser::showFailed(const QString& message) {
  status_->setStyleSheet(QStringLiteral("color: #b00020;"));
  status_->setText(tr("Not loaded: %1").arg(message));
}

void ModelChooser::setBusy(bool busy) {
  for (QWidget* w : {static_cast<QWidget*>(path_), static_cast<QWidget*>(folder_button_),
                     static_cast<QWidget*>(file_button_), static_cast<QWidget*>(load_)})
    w->setEnabled(!busy);
  tokenizer_->setEnabled(!busy);
  tokenizer_button_->setEnabled(!busy);
  if (!busy) updateTokenizerEnabled();
}

void ModelChooser::updateTokenizerEnabled() {
  const bool single_file = QFileInfo(path()).isFile() || path().endsWith(QStringLiteral(".safetensors"));
  tokenizer_->setEnabled(single_file);
  tokenizer_button_->setEnabled(single_file);
}

void ModelChooser::browseFolder() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Diffusers model folder"), start_folder_);
  if (dir.isEmpty()) return;
  setPath(dir);
  emit folderChosen(QFileInfo(dir).absolutePath());
  emit loadRequested(path(), tokenizerDir());
}

void ModelChooser::browseFile() {
  const QString file = QFileDialog::getOpenFileName(this, tr("Single-file checkpoint"), start_folder_,
                                                    tr("Safetensors checkpoints (*.safetensors)"));
  if (file.isEmpty()) return;
  setPath(file);
  emit folderChosen(QFileInfo(file).absolutePath());
  emit loadRequested(path(), tokenizerDir());
}

void ModelChooser::browseTokenizer() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Tokenizer folder (vocab.json, merges.txt)"), start_folder_);
  if (!dir.isEmpty()) setTokenizerDir(dir);
}

}  // namespace octodiff::gui
