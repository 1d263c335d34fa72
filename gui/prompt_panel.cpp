#include "prompt_panel.h"

#include <QGridLayout>
#include <QLabel>

namespace octodiff::gui {

PromptPanel::PromptPanel(QWidget* parent) : QWidget(parent) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setVerticalSpacing(3);
  for (int i = 0; i < kPromptFields; ++i) {
    auto* label = new QLabel(QString::number(i + 1));
    label->setToolTip(tr("Prompt of device %1").arg(i + 1));
    label->setStyleSheet(QStringLiteral("color: palette(mid); font-weight: bold;"));
    auto* field = new QLineEdit;
    field->setObjectName(QStringLiteral("prompt%1").arg(i + 1));
    field->setPlaceholderText(i == 0 ? tr("Describe an image…") : tr("(empty: not used)"));
    field->setClearButtonEnabled(true);
    connect(field, &QLineEdit::textChanged, this, &PromptPanel::promptsChanged);
    connect(field, &QLineEdit::returnPressed, this, &PromptPanel::submitted);
    grid->addWidget(label, i, 0);
    grid->addWidget(field, i, 1);
    fields_[i] = field;
  }
  auto* neg_label = new QLabel(tr("Negative"));
  negative_ = new QLineEdit;
  negative_->setObjectName(QStringLiteral("negativePrompt"));
  setNegativePromptUnused(QString(), QString());
  negative_->setClearButtonEnabled(true);
  connect(negative_, &QLineEdit::returnPressed, this, &PromptPanel::submitted);
  grid->addWidget(neg_label, kPromptFields, 0, 1, 2);
  grid->addWidget(negative_, kPromptFields + 1, 0, 1, 2);
  grid->setColumnStretch(1, 1);
}

QStringList PromptPanel::prompts() const {
  QStringList out;
  for (auto* f : fields_) out << f->text();
  return out;
}

QStringList PromptPanel::nonEmptyPrompts() const {
  QStringList out;
  for (auto* f : fields_)
    if (!f->text().trimmed().isEmpty()) out << f->text();
  return out;
}

void PromptPanel::setPrompts(const QStringList& prompts) {
  for (int i = 0; i < kPromptFields; ++i) fields_[i]->setText(i < prompts.size() ? prompts[i] : QString());
}

void PromptPanel::setNegativePromptUnused(const QString& placeholder, const QString& why) {
  negative_->setEnabled(why.isEmpty());
  negative_->setToolTip(why);
  negative_->setPlaceholderText(why.isEmpty() ? tr("What to steer away from (every image)") : placeholder);
}

}  // namespace octodiff::gui
