// FewStepPanel: under the settings, a note when the loaded model is a few-step one ("Few-step
// model (LCM-distilled UNet, guidance embedded): 4 steps, guidance 8 — change freely") and the
// "Few-step preset" button (LCM, 4 steps, guidance 1.5) for a model with an LCM-LoRA.
#pragma once

#include <QLabel>
#include <QPushButton>
#include <QWidget>

namespace octodiff::gui {

class FewStepPanel : public QWidget {
  Q_OBJECT
 public:
  explicit FewStepPanel(QWidget* parent = nullptr);

  void setNote(const QString& note);  // empty: hidden
  QString note() const { return note_->text(); }
  QLabel* noteLabel() const { return note_; }
  QPushButton* presetButton() const { return preset_; }

 signals:
  void presetRequested();

 private:
  QLabel* note_;
  QPushButton* preset_;
};

}  // namespace octodiff::gui
