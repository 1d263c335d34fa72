// PromptPanel: eight prompt fields (one per device of the 2×4 grid; any may be empty) and the
// negative prompt.
#pragma once

#include <QLineEdit>
#include <QStringList>
#include <QWidget>
#include <array>

namespace octodiff::gui {

class PromptPanel : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kPromptFields = 8;

  explicit PromptPanel(QWidget* parent = nullptr);

  QStringList prompts() const;                  // all eight fields, as typed
  QStringList nonEmptyPrompts() const;          // the fields that hold text, in order
  void setPrompts(const QStringList& prompts);  // fills fields in order, clears the rest
  QString negativePrompt() const { return negative_->text(); }
  void setNegativePrompt(const QString& text) { negative_->setText(text); }
  QLineEdit* promptField(int i) const { return fields_.at(i); }
  QLineEdit* negativeField() const { return negative_; }
  // Greys the negative prompt out (its text kept) with `placeholder` and `why` (the tooltip) while
  // no UNet pass would read it; an empty `why` puts it back in use with its usual placeholder.
  void setNegativePromptUnused(const QString& placeholder, const QString& why);

 signals:
  void promptsChanged();
  void submitted();  // Return pressed in a field

 private:
  std::array<QLineEdit*, kPromptFields> fields_{};
  QLineEdit* negative_ = nullptr;
};

}  // namespace octodiff::gui
