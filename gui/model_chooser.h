// ModelChooser: which checkpoint to run — a diffusers folder or a single .safetensors file (with
// a tokenizer folder, which single files lack), the recent ones remembered — and its load status.
#pragma once

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QWidget>

namespace octodiff::gui {

class ModelChooser : public QWidget {
  Q_OBJECT
 public:
  explicit ModelChooser(QWidget* parent = nullptr);

  QString path() const;
  void setPath(const QString& path);
  QString tokenizerDir() const { return tokenizer_->text().trimmed(); }
  void setTokenizerDir(const QString& dir) { tokenizer_->setText(dir); }
  void setRecent(const QStringList& paths);  // newest first
  void setStartFolder(const QString& folder) { start_folder_ = folder; }

  void showLoading(const QString& path);
  void showLoaded(const QString& label, const QString& description, double seconds);
  void showFailed(const QString& message);
  void setBusy(bool busy);  // no loading while a job runs

  QLabel* statusLabel() const { return status_; }

 signals:
  void loadRequested(const QString& path, const QString& tokenizerDir);
  void folderChosen(const QString& folder);

 private:
  void browseFolder();
  void browseFile();
  void browseTokenizer();
  void updateTokenizerEnabled();

  QComboBox* path_ = nullptr;
  QLineEdit* tokenizer_ = nullptr;
  QPushButton *folder_button_ = nullptr, *file_button_ = nullptr, *tokenizer_button_ = nullptr;
  QPushButton* load_ = nullptr;
  QLabel* status_ = nullptr;
  QString start_folder_;
};

}  // namespace octodiff::gui
