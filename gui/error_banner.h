// ErrorBanner: an inline message strip at the top of the window (errors in red, notes in amber)
// instead of a modal box, so a problem never blocks the UI — or a test.
#pragma once

#include <QFrame>
#include <QLabel>

namespace octodiff::gui {

class ErrorBanner : public QFrame {
  Q_OBJECT
 public:
  explicit ErrorBanner(QWidget* parent = nullptr);
  void showError(const QString& message);
  void showNote(const QString& message);
  void dismiss();
  QString message() const { return text_->text(); }
  bool isError() const { return error_; }

 private:
  void showMessage(const QString& message, bool error);
  QLabel* text_;
  bool error_ = false;
};

}  // namespace octodiff::gui
