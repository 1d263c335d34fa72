#include "error_banner.h"

#include <QHBoxLayout>
#include <QToolButton>

namespace octodiff::gui {

ErrorBanner::ErrorBanner(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("errorBanner"));
  text_ = new QLabel;
  text_->setObjectName(QStringLiteral("errorText"));
  text_->setWordWrap(true);
  text_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  text_->setTextFormat(Qt::PlainText);
  auto* close = new QToolButton;
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  close->setToolTip(tr("Dismiss"));
  connect(close, &QToolButton::clicked, this, &ErrorBanner::dismiss);
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(10, 6, 6, 6);
  row->addWidget(text_, 1);
  row->addWidget(close, 0, Qt::AlignTop);
  setVisible(false);
}

void ErrorBanner::showError(const QString& message) {
  showMessage(message, true);
}
void ErrorBanner::showNote(const QString& message) {
  showMessage(message, false);
}

void ErrorBanner::showMessage(const QString& message, bool error) {
  error_ = error;
  text_->setText(message);
  setStyleSheet(
      error ? QStringLiteral(
                  "#errorBanner { background: #fde7e9; border: 1px solid #d13438; border-radius: 4px; }"
                  " QLabel { color: #7a1016; }")
            : QStringLiteral(
                  "#errorBanner { background: #fff4ce; border: 1px solid #c19c00; border-radius: 4px; }"
                  " QLabel { color: #4d3b00; }"));
  setVisible(true);
}

void ErrorBanner::dismiss() {
  text_->clear();
  setVisible(false);
}

}  // namespace octodiff::gui
