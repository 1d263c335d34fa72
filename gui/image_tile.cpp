#include "image_tile.h"

#include <QContextMenuEvent>
#include <QGridLayout>
#include <QMenu>
#include <QPainter>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace octodiff::gui {

ImageCanvas::ImageCanvas(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
  setMinimumSize(48, 48);
}

void ImageCanvas::setImage(const QImage& image) {
  image_ = image;
  placeholder_.clear();
  update();
}

void ImageCanvas::setOverlay(const QString& text) {
  overlay_ = text;
  update();
}

void ImageCanvas::setCover(const QString& label) {
  cover_ = label;
  update();
}

void ImageCanvas::setPlaceholder(const QString& text) {
  image_ = QImage();
  overlay_.clear();
  cover_.clear();
  placeholder_ = text;
  update();
}

QRect ImageCanvas::imageRect() const {
  if (image_.isNull()) return {};
  const double fit = std::min(static_cast<double>(width() - 2) / image_.width(),
                              static_cast<double>(height() - 2) / image_.height());
  // Large whole-number factors keep blown-up pixels square and equal at little cost in size.
  const double scale = fit >= 4.0 ? std::floor(fit) : fit;
  const int w = std::max(1, static_cast<int>(image_.width() * scale));
  const int h = std::max(1, static_cast<int>(image_.height() * scale));
  return {(width() - w) / 2, (height() - h) / 2, w, h};
}

void ImageCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  if (image_.isNull()) {
    p.fillRect(rect(), QColor(36, 36, 42));
    p.setPen(QColor(170, 170, 180));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, placeholder_);
    return;
  }
  const QRect target = imageRect();
  // Nearest when blowing small images up a lot (crisp pixels, as demo images are 64–128 px),
  // smooth when the factor is small or the image is shrunk.
  p.setRenderHint(QPainter::SmoothPixmapTransform, target.width() < 2 * image_.width());
  if (covered()) {
    paintCover(p, target);
    return;
  }
  p.drawImage(target, image_);
  p.setPen(QColor(0, 0, 0, 90));
  p.drawRect(target.adjusted(-1, -1, 0, 0));
  if (!overlay_.isEmpty()) {
    QFont f = p.font();
    f.setBold(true);
    p.setFont(f);
    const QRect badge = p.fontMetrics().boundingRect(overlay_).adjusted(-6, -3, 6, 3);
    const QRect placed = badge.translated(target.topLeft() - badge.topLeft() + QPoint(6, 6));
    p.fillRect(placed, QColor(0, 0, 0, 160));
    p.setPen(Qt::white);
    p.drawText(placed, Qt::AlignCenter, overlay_);
  }
}

// A heavy blur (the image shrunk to ~8 px across and smoothly enlarged), dimmed, and the label.
void ImageCanvas::paintCover(QPainter& p, const QRect& target) {
  const int side = std::max(1, std::min(image_.width(), image_.height()) / 8);
  const QImage tiny = image_.scaled(std::max(1, image_.width() / side), std::max(1, image_.height() / side),
                                    Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
  p.setRenderHint(QPainter::SmoothPixmapTransform, true);
  p.drawImage(target, tiny);
  p.fillRect(target, QColor(20, 20, 24, 170));
  QFont f = p.font();
  f.setBold(true);
  p.setFont(f);
  p.setPen(Qt::white);
  p.drawText(target.adjusted(6, 6, -6, -6), Qt::AlignCenter | Qt::TextWordWrap, cover_);
}

ImageTile::ImageTile(int index, QWidget* parent) : QFrame(parent), index_(index) {
  setObjectName(QStringLiteral("imageTile%1").arg(index));
  setFrameShape(QFrame::StyledPanel);
  setCursor(Qt::PointingHandCursor);
  canvas_ = new ImageCanvas;
  prompt_ = new QLabel;
  prompt_->setObjectName(QStringLiteral("tilePrompt"));
  QFont bold = prompt_->font();
  bold.setBold(true);
  prompt_->setFont(bold);
  prompt_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  detail_ = new QLabel;
  detail_->setObjectName(QStringLiteral("tileDetail"));
  detail_->setForegroundRole(QPalette::PlaceholderText);  // dim in light and dark palettes alike
  detail_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);

  // The per-image actions float over the picture's corner while the pointer is on the tile.
  actions_ = new QWidget(canvas_);
  actions_->setObjectName(QStringLiteral("tileActions"));
  actions_->setAttribute(Qt::WA_StyledBackground);
  actions_->setStyleSheet(
      QStringLiteral("#tileActions { background: rgba(20, 20, 24, 190); border-radius: 4px; }"
                     "QToolButton { color: white; padding: 1px 4px; border: none; }"
                     "QToolButton:hover { background: rgba(255, 255, 255, 60); border-radius: 3px; }"));
  auto add = [&](const QString& text, const QString& tip, void (ImageTile::*signal)(int)) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setToolTip(tip);
    b->setCursor(Qt::ArrowCursor);
    connect(b, &QToolButton::clicked, this, [this, signal] { emit(this->*signal)(index_); });
    action_buttons_.push_back(b);
  };
  add(tr("Save"), tr("Save this image as PNG with its settings"), &ImageTile::saveRequested);
  add(tr("Copy"), tr("Copy this image to the clipboard"), &ImageTile::copyRequested);
  add(tr("Reuse"), tr("Put this image's settings (prompt, seed, …) into the form"),
      &ImageTile::reuseRequested);
  add(tr("Vary"), tr("Start image-to-image variations from this image (it becomes the init image)"),
      &ImageTile::varyRequested);
  placeActionButtons(static_cast<int>(action_buttons_.size()));
  actions_->adjustSize();
  actions_->setVisible(false);
  setToolTip(tr("Click to enlarge; right-click or hover for Save, Copy, Reuse, Vary"));

  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(4, 4, 4, 2);
  column->setSpacing(2);
  column->addWidget(canvas_, 1);
  column->addWidget(prompt_);
  column->addWidget(detail_);
}

void ImageTile::setCaption(const QString& prompt, const QString& detail) {
  prompt_text_ = prompt;
  prompt_->setToolTip(prompt);
  detail_text_ = detail;
  detail_->setToolTip(detail);
  updateElidedPrompt();
}

// The prompt and the detail line, each elided ("…") to the tile's width rather than cut off.
void ImageTile::updateElidedPrompt() {
  const QString shown = prompt_text_.isEmpty() ? tr("(empty prompt)") : prompt_text_;
  prompt_->setText(prompt_->fontMetrics().elidedText(shown, Qt::ElideRight, std::max(20, prompt_->width())));
  detail_->setText(detail_->fontMetrics().elidedText(detail_text_, Qt::ElideRight, std::max(20, detail_->width())));
}

void ImageTile::resizeEvent(QResizeEvent* event) {
  QFrame::resizeEvent(event);
  updateElidedPrompt();
  if (actions_->isVisible()) setActionsVisible(true);
}

void ImageTile::showPlaceholder(const QString& text) {
  final_ = preview_ = false;
  canvas_->setPlaceholder(text);
  setActionsVisible(false);
}

void ImageTile::showPreview(const QImage& image, int step, int steps) {
  preview_ = true;
  final_ = flagged_ = false;
  canvas_->setCover(QString());
  canvas_->setImage(image);
  canvas_->setOverlay(tr("step %1/%2").arg(step).arg(steps));
}

void ImageTile::showFinal(const QImage& image) {
  final_ = true;
  preview_ = flagged_ = false;
  canvas_->setCover(QString());  // setFlagged() covers it again
  canvas_->setImage(image);
  canvas_->setOverlay(QString());
  setActionsVisible(underMouse());
}

void ImageTile::setFlagged(bool flagged) {
  flagged_ = flagged;
  canvas_->setCover(flagged ? tr("Flagged by the safety checker\n(click to show)") : QString());
  canvas_->setOverlay(flagged ? tr("flagged") : QString());
}

void ImageTile::setActionsVisible(bool visible) {
  actions_->setVisible(visible && final_);
  if (actions_->isVisible()) {
    const QRect r = canvas_->imageRect().isNull() ? canvas_->rect() : canvas_->imageRect();
    arrangeActions(r.width() - 6);
    // At the picture's top right; never past the canvas's left edge, whatever its width.
    actions_->move(std::max(0, r.right() - actions_->width() - 3), r.top() + 3);
    actions_->raise();
  }
}

void ImageTile::arrangeActions(int available_width) {
  const int all = static_cast<int>(action_buttons_.size());
  for (int columns : {all, (all + 1) / 2, 1}) {
    placeActionButtons(columns);
    if (actions_->sizeHint().width() <= available_width) break;
  }
  actions_->resize(actions_->sizeHint());
}

// A fresh grid each time (an old one would keep the rows or columns it no longer fills).
void ImageTile::placeActionButtons(int columns) {
  if (columns == action_columns_) return;
  action_columns_ = columns;
  delete actions_->layout();  // the buttons stay, children of actions_
  auto* grid = new QGridLayout(actions_);
  grid->setContentsMargins(2, 2, 2, 2);
  grid->setSpacing(1);
  for (int i = 0; i < static_cast<int>(action_buttons_.size()); ++i)
    grid->addWidget(action_buttons_[i], i / columns, i % columns);
}

void ImageTile::enterEvent(QEnterEvent* event) {
  QFrame::enterEvent(event);
  setActionsVisible(true);
}

void ImageTile::leaveEvent(QEvent* event) {
  QFrame::leaveEvent(event);
  setActionsVisible(false);
}

void ImageTile::mouseReleaseEvent(QMouseEvent* event) {
  QFrame::mouseReleaseEvent(event);
  if (final_ && canvas_->covered()) {
    canvas_->setCover(QString());  // revealed; the "flagged" badge stays
    return;
  }
  if (final_) emit clicked(index_);
}

void ImageTile::contextMenuEvent(QContextMenuEvent* event) {
  if (!final_) return;
  QMenu menu(this);
  menu.addAction(tr("Enlarge"), this, [this] { emit clicked(index_); });
  menu.addSeparator();
  menu.addAction(tr("Save as PNG…"), this, [this] { emit saveRequested(index_); });
  menu.addAction(tr("Copy"), this, [this] { emit copyRequested(index_); });
  menu.addAction(tr("Reuse settings"), this, [this] { emit reuseRequested(index_); });
  menu.addAction(tr("Vary (image to image)"), this, [this] { emit varyRequested(index_); });
  menu.exec(event->globalPos());
}

}  // namespace octodiff::gui
