#include "few_step_panel.h"

#include <QHBoxLayout>
#include <QVBoxLayout>

#include "few_step.h"

namespace octodiff::gui {

FewStepPanel::FewStepPanel(QWidget* parent) : QWidget(parent) {
  note_ = new QLabel;
  note_->setObjectName(QStringLiteral("fewStepNote"));
  note_->setWordWrap(true);
  note_->setStyleSheet(QStringLiteral("QLabel { background: #e6f4ea; color: #1e4620; border: 1px solid #a8d5b5; "
                                      "border-radius: 3px; padding: 3px 6px; }"));
  note_->setVisible(false);
  preset_ = new QPushButton(tr("Few-step preset (LCM-LoRA)"));
  preset_->setObjectName(QStringLiteral("fewStepPreset"));
  preset_->setToolTip(tr("LCM scheduler, %1: for any model with an LCM-LoRA merged (see LoRA below).")
                          .arg(describeSampling({lcmLoraPreset().steps, lcmLoraPreset().guidance, std::nullopt})));
  connect(preset_, &QPushButton::clicked, this, &FewStepPanel::presetRequested);
  auto* row = new QHBoxLayout;
  row->setContentsMargins(0, 0, 0, 0);
  row->addStretch(1);
  row->addWidget(preset_);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(4);
  column->addWidget(note_);
  column->addLayout(row);
}

void FewStepPanel::setNote(const QString& note) {
  note_->setText(note);
  note_->setVisible(!note.isEmpty());
}

}  // namespace octodiff::gui
