#include "mask_editor.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QHBoxLayout>
#include <QMimeData>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QUndoCommand>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "run_record.h"

namespace octodiff::gui {
namespace {

const QColor kMaskColour(235, 40, 60);  // the overlay's colour, drawn at kOverlayOpacity
constexpr double kOverlayOpacity = 0.55;
constexpr int kUndoLimit = 100;

// One change of the mask layer: the layer before and after it (implicitly shared images).
class MaskEdit : public QUndoCommand {
 public:
  MaskEdit(MaskEditor* editor, QImage before, QImage after, const QString& text)
      : QUndoCommand(text), editor_(editor), before_(std::move(before)), after_(std::move(after)) {}
  void undo() override { editor_->setMaskLayer(before_); }
  void redo() override { editor_->setMaskLayer(after_); }

 private:
  MaskEditor* editor_;
  QImage before_, after_;
};

QImage emptyLayer(const QSize& size) {
  QImage layer(size, QImage::Format_ARGB32_Premultiplied);
  layer.fill(Qt::transparent);
  return layer;
}

}  // namespace

MaskCanvas::MaskCanvas(MaskEditor* editor) : QWidget(editor), editor_(editor) {
  setObjectName(QStringLiteral("maskCanvas"));
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
  setMinimumSize(160, 160);
  setMouseTracking(true);
  setCursor(Qt::CrossCursor);
}

QRect MaskCanvas::imageRect() const {
  const QImage& image = editor_->image();
  if (image.isNull()) return {};
  const double fit = std::min(static_cast<double>(width() - 2) / image.width(),
                              static_cast<double>(height() - 2) / image.height());
  const double scale = fit >= 4.0 ? std::floor(fit) : fit;  // square pixels for small images
  const int w = std::max(1, static_cast<int>(image.width() * scale));
  const int h = std::max(1, static_cast<int>(image.height() * scale));
  return {(width() - w) / 2, (height() - h) / 2, w, h};
}

QPointF MaskCanvas::toImage(const QPointF& p) const {
  const QRect r = imageRect();
  if (r.isEmpty()) return {};
  return {(p.x() - r.x()) * editor_->image().width() / r.width(),
          (p.y() - r.y()) * editor_->image().height() / r.height()};
}

QPointF MaskCanvas::toWidget(const QPointF& p) const {
  const QRect r = imageRect();
  if (r.isEmpty()) return {};
  return {r.x() + p.x() * r.width() / editor_->image().width(),
          r.y() + p.y() * r.height() / editor_->image().height()};
}

void MaskCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(36, 36, 42));
  if (!editor_->hasImage()) {
    p.setPen(QColor(170, 170, 180));
    p.drawText(rect().adjusted(16, 16, -16, -16), Qt::AlignCenter | Qt::TextWordWrap,
               tr("No init image.\nVary a result, open an image under Image to image, or drop an image "
                  "file here; then paint the area to repaint."));
    return;
  }
  const QRect target = imageRect();
  p.setRenderHint(QPainter::SmoothPixmapTransform, target.width() < 2 * editor_->image().width());
  p.drawImage(target, editor_->overlaid());
  p.setPen(QColor(0, 0, 0, 90));
  p.drawRect(target.adjusted(-1, -1, 0, 0));
  if (pointer_.x() >= 0) {  // the brush outline, in black and white so it shows on any picture
    const double r = 0.5 * editor_->brushSize() * target.width() / editor_->image().width();
    p.setRenderHint(QPainter::Antialiasing);
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(Qt::black, 2));
    p.drawEllipse(pointer_, r, r);
    p.setPen(QPen(Qt::white, 1));
    p.drawEllipse(pointer_, r, r);
  }
}

void MaskCanvas::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !editor_->hasImage()) return QWidget::mousePressEvent(event);
  stroking_ = true;
  editor_->beginStroke(toImage(event->position()));
}

void MaskCanvas::mouseMoveEvent(QMouseEvent* event) {
  pointer_ = event->position();
  if (stroking_) editor_->continueStroke(toImage(event->position()));
  update();
}

void MaskCanvas::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !stroking_) return QWidget::mouseReleaseEvent(event);
  stroking_ = false;
  editor_->continueStroke(toImage(event->position()));
  editor_->endStroke();
}

void MaskCanvas::leaveEvent(QEvent* event) {
  QWidget::leaveEvent(event);
  pointer_ = {-1, -1};
  update();
}

MaskEditor::MaskEditor(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("maskEditor"));
  setAcceptDrops(true);
  undo_ = new QUndoStack(this);
  undo_->setUndoLimit(kUndoLimit);
  canvas_ = new MaskCanvas(this);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(4, 4, 4, 4);
  column->addWidget(buildTools());
  column->addWidget(canvas_, 1);
  updateStatus();
}

QWidget* MaskEditor::buildTools() {
  auto* tools = new QWidget;
  auto* row = new QHBoxLayout(tools);
  row->setContentsMargins(0, 0, 0, 0);
  brush_ = new QRadioButton(tr("Brush"));
  brush_->setObjectName(QStringLiteral("maskBrush"));
  brush_->setToolTip(tr("Paint the area to repaint (white in the mask)"));
  brush_->setChecked(true);
  eraser_ = new QRadioButton(tr("Eraser"));
  eraser_->setObjectName(QStringLiteral("maskEraser"));
  eraser_->setToolTip(tr("Take painted area back out of the mask"));
  connect(brush_, &QRadioButton::toggled, this, [this](bool on) { tool_ = on ? Tool::Brush : Tool::Eraser; });
  size_ = new QSpinBox;
  size_->setObjectName(QStringLiteral("maskBrushSize"));
  size_->setRange(1, 1024);
  size_->setValue(16);
  size_->setSuffix(tr(" px"));
  size_->setToolTip(tr("Brush diameter in pixels of the init image"));
  connect(size_, &QSpinBox::valueChanged, canvas_, qOverload<>(&QWidget::update));
  auto button = [&](const QString& text, const QString& name, const QString& tip) {
    auto* b = new QPushButton(text);
    b->setObjectName(name);
    b->setToolTip(tip);
    row->addWidget(b);
    return b;
  };
  row->addWidget(brush_);
  row->addWidget(eraser_);
  row->addWidget(new QLabel(tr("Size")));
  row->addWidget(size_);
  QPushButton* undo = button(tr("Undo"), QStringLiteral("maskUndo"), tr("Undo the last stroke (Ctrl+Z)"));
  undo->setShortcut(QKeySequence::Undo);
  QPushButton* redo = button(tr("Redo"), QStringLiteral("maskRedo"), tr("Redo (Ctrl+Shift+Z)"));
  redo->setShortcut(QKeySequence::Redo);
  QPushButton* invert = button(tr("Invert"), QStringLiteral("maskInvert"),
                               tr("Repaint what is kept and keep what is repainted"));
  QPushButton* clear = button(tr("Clear"), QStringLiteral("maskClear"), tr("Remove the whole mask"));
  connect(undo, &QPushButton::clicked, this, &MaskEditor::undo);
  connect(redo, &QPushButton::clicked, this, &MaskEditor::redo);
  connect(undo_, &QUndoStack::canUndoChanged, undo, &QPushButton::setEnabled);
  connect(undo_, &QUndoStack::canRedoChanged, redo, &QPushButton::setEnabled);
  undo->setEnabled(false);
  redo->setEnabled(false);
  connect(invert, &QPushButton::clicked, this, &MaskEditor::invert);
  connect(clear, &QPushButton::clicked, this, &MaskEditor::clear);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("maskStatus"));
  row->addStretch(1);
  row->addWidget(status_);
  return tools;
}

void MaskEditor::setImage(const QImage& image) {
  image_ = image.isNull() ? QImage() : image.convertToFormat(QImage::Format_RGB888);
  layer_ = image_.isNull() ? QImage() : emptyLayer(image_.size());
  undo_->clear();
  stroking_ = false;
  // A brush an eighth of the picture's shorter side: a few strokes cover an object.
  if (!image_.isNull()) setBrushSize(std::max(1, std::min(image_.width(), image_.height()) / 8));
  canvas_->update();
  updateStatus();
  emit maskChanged();
}

void MaskEditor::setMask(const QImage& mask) {
  if (!hasImage() || mask.isNull()) return;
  const QImage grey = mask.convertToFormat(QImage::Format_Grayscale8)
                          .scaled(image_.size(), Qt::IgnoreAspectRatio, Qt::FastTransformation);
  QImage layer = emptyLayer(image_.size());
  for (int y = 0; y < grey.height(); ++y) {
    const uchar* in = grey.constScanLine(y);
    auto* out = reinterpret_cast<QRgb*>(layer.scanLine(y));
    for (int x = 0; x < grey.width(); ++x)
      if (in[x] >= 128) out[x] = kMaskColour.rgba();
  }
  undo_->clear();
  setMaskLayer(layer);
}

void MaskEditor::setTool(Tool tool) {
  (tool == Tool::Brush ? brush_ : eraser_)->setChecked(true);
  tool_ = tool;
}

void MaskEditor::setMaskLayer(const QImage& layer) {
  layer_ = layer;
  canvas_->update();
  updateStatus();
  emit maskChanged();
}

QImage MaskEditor::mask() const {
  if (layer_.isNull()) return {};
  const QImage alpha = layer_.convertToFormat(QImage::Format_Alpha8);
  QImage grey(layer_.size(), QImage::Format_Grayscale8);
  for (int y = 0; y < grey.height(); ++y) std::memcpy(grey.scanLine(y), alpha.constScanLine(y), grey.width());
  return grey;
}

Image8 MaskEditor::maskImage8() const {
  return toImage8(mask());
}

bool MaskEditor::hasMask() const {
  return maskedFraction() > 0;
}

double MaskEditor::maskedFraction() const {
  if (layer_.isNull()) return 0;
  int64_t painted = 0;
  for (int y = 0; y < layer_.height(); ++y) {
    const auto* line = reinterpret_cast<const QRgb*>(layer_.constScanLine(y));
    for (int x = 0; x < layer_.width(); ++x) painted += qAlpha(line[x]) >= 128;
  }
  return static_cast<double>(painted) / (static_cast<double>(layer_.width()) * layer_.height());
}

QImage MaskEditor::overlaid() const {
  if (image_.isNull()) return {};
  QImage out = image_.convertToFormat(QImage::Format_ARGB32_Premultiplied);
  QPainter p(&out);
  p.setOpacity(kOverlayOpacity);
  p.drawImage(0, 0, layer_);
  return out;
}

void MaskEditor::paintSegment(const QPointF& from, const QPointF& to) {
  QPainter p(&layer_);
  p.setRenderHint(QPainter::Antialiasing, false);  // a binary mask
  p.setCompositionMode(QPainter::CompositionMode_Source);
  const QColor colour = stroke_tool_ == Tool::Brush ? kMaskColour : QColor(Qt::transparent);
  const double d = brushSize();
  if (from == to) {
    p.setPen(Qt::NoPen);
    p.setBrush(colour);
    p.drawEllipse(from, d / 2, d / 2);
  } else {
    p.setPen(QPen(colour, d, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
    p.drawLine(from, to);
  }
}

void MaskEditor::beginStroke(const QPointF& at) {
  if (!hasImage()) return;
  stroking_ = true;
  stroke_tool_ = tool_;
  stroke_before_ = layer_.copy();
  last_ = at;
  paintSegment(at, at);
  canvas_->update();
}

void MaskEditor::continueStroke(const QPointF& to) {
  if (!stroking_ || to == last_) return;
  paintSegment(last_, to);
  last_ = to;
  canvas_->update();
}

void MaskEditor::endStroke() {
  if (!stroking_) return;
  stroking_ = false;
  pushLayer(std::exchange(stroke_before_, QImage()),
            stroke_tool_ == Tool::Brush ? tr("brush stroke") : tr("eraser stroke"));
}

void MaskEditor::paintStroke(const QVector<QPointF>& points, Tool tool) {
  if (points.isEmpty() || !hasImage()) return;
  const Tool kept = tool_;
  tool_ = tool;
  beginStroke(points.front());
  for (const QPointF& p : points) continueStroke(p);
  endStroke();
  tool_ = kept;
}

void MaskEditor::pushLayer(const QImage& before, const QString& what) {
  if (before == layer_) return;                           // nothing changed: no undo step
  undo_->push(new MaskEdit(this, before, layer_, what));  // redo() sets what is already there
}

void MaskEditor::invert() {
  if (!hasImage()) return;
  const QImage before = layer_;
  QImage inverted = emptyLayer(layer_.size());
  for (int y = 0; y < layer_.height(); ++y) {
    const auto* in = reinterpret_cast<const QRgb*>(layer_.constScanLine(y));
    auto* out = reinterpret_cast<QRgb*>(inverted.scanLine(y));
    for (int x = 0; x < layer_.width(); ++x)
      if (qAlpha(in[x]) < 128) out[x] = kMaskColour.rgba();
  }
  layer_ = inverted;
  pushLayer(before, tr("invert"));
}

void MaskEditor::clear() {
  if (!hasImage()) return;
  const QImage before = layer_;
  layer_ = emptyLayer(layer_.size());
  pushLayer(before, tr("clear"));
}

void MaskEditor::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && event->mimeData()->urls().value(0).isLocalFile())
    event->acceptProposedAction();
}

void MaskEditor::dropEvent(QDropEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (urls.isEmpty() || !urls.front().isLocalFile()) return;
  event->acceptProposedAction();
  emit fileDropped(urls.front().toLocalFile());
}

void MaskEditor::updateStatus() {
  if (!hasImage()) {
    status_->setText(tr("no image"));
    return;
  }
  const double f = maskedFraction();
  status_->setText(
      f > 0 ? tr("%1 × %2 · %3 % repainted").arg(image_.width()).arg(image_.height()).arg(100 * f, 0, 'f', 1)
            : tr("%1 × %2 · no mask: the whole image is varied").arg(image_.width()).arg(image_.height()));
}

}  // namespace octodiff::gui
