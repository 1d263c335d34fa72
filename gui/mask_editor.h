// MaskEditor: paints an inpainting mask over the init image — a brush (white: repaint) and an
// eraser (black: keep) of a chosen size in image pixels, undo/redo (QUndoStack), invert, clear.
// The mask shows as a semi-transparent red overlay; mask() is an 8-bit grey image of exactly the
// init image's size (255 where painted, 0 elsewhere; no anti-aliasing, the engine's "Mask blur"
// softens it), which maskImage8() hands to GenerationRequest::masks.
#pragma once

#include <QImage>
#include <QLabel>
#include <QPointF>
#include <QRadioButton>
#include <QSpinBox>
#include <QToolButton>
#include <QUndoStack>
#include <QVector>
#include <QWidget>

#include "io/image.h"

namespace octodiff::gui {

class MaskEditor;

// The painting surface: the image scaled to fit (whole factors when blown up, as ImageCanvas),
// the mask over it and the brush outline under the pointer. Mouse strokes go to the editor.
class MaskCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit MaskCanvas(MaskEditor* editor);
  QRect imageRect() const;                          // where the image is drawn
  QPointF toImage(const QPointF& widgetPos) const;  // widget → image pixel coordinates
  QPointF toWidget(const QPointF& imagePos) const;  // image → widget coordinates
  QSize sizeHint() const override { return {480, 480}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  MaskEditor* editor_;
  QPointF pointer_{-1, -1};  // widget coordinates of the brush outline; negative: none
  bool stroking_ = false;
};

class MaskEditor : public QWidget {
  Q_OBJECT
 public:
  enum class Tool { Brush, Eraser };
  explicit MaskEditor(QWidget* parent = nullptr);

  // A new image: the mask starts empty and the undo history is cleared. A null image empties it.
  void setImage(const QImage& image);
  const QImage& image() const { return image_; }
  bool hasImage() const { return !image_.isNull(); }

  QImage mask() const;            // Format_Grayscale8, image().size(); 255 = repaint, 0 = keep
  Image8 maskImage8() const;      // the same as RGB for the engine (white = repaint)
  bool hasMask() const;           // at least one pixel is painted
  double maskedFraction() const;  // of the image's pixels, 0..1
  // The image with the mask's overlay drawn on it (thumbnails, screenshots).
  QImage overlaid() const;

  Tool tool() const { return tool_; }
  void setTool(Tool tool);
  int brushSize() const { return size_->value(); }  // diameter in image pixels
  void setBrushSize(int pixels) { size_->setValue(pixels); }

  // A stroke through `points` (image pixel coordinates) with `tool`, as one undo step; what a
  // mouse drag does.
  void paintStroke(const QVector<QPointF>& points, Tool tool);
  // The same, point by point (MaskCanvas's mouse handlers).
  void beginStroke(const QPointF& at);
  void continueStroke(const QPointF& to);
  void endStroke();

  QUndoStack* undoStack() const { return undo_; }
  QSpinBox* brushSizeBox() const { return size_; }

  // A mask from elsewhere (a run's, reused): pixels ≥ 128 are painted; scaled to the image's size
  // when it differs. Clears the undo history, as a new image does.
  void setMask(const QImage& mask);
  // Replaces the mask as it is drawn (the undo commands): premultiplied ARGB, painted = opaque.
  void setMaskLayer(const QImage& layer);

 public slots:
  void invert();
  void clear();
  void undo() { undo_->undo(); }
  void redo() { undo_->redo(); }

 signals:
  void maskChanged();
  void fileDropped(const QString& path);  // a file dropped on the editor (to become the image)

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  QWidget* buildTools();
  void pushLayer(const QImage& before, const QString& what);
  void paintSegment(const QPointF& from, const QPointF& to);
  void updateStatus();

  QImage image_;  // RGB888
  QImage layer_;  // ARGB32_Premultiplied, the image's size: opaque where painted, clear elsewhere
  QImage stroke_before_;
  QPointF last_;
  bool stroking_ = false;
  Tool tool_ = Tool::Brush;
  Tool stroke_tool_ = Tool::Brush;
  MaskCanvas* canvas_;
  QUndoStack* undo_;
  QSpinBox* size_;
  QRadioButton *brush_, *eraser_;
  QLabel* status_;
};

}  // namespace octodiff::gui
