// ImageTile: one image of a result grid — the picture (scaled to fit; nearest-neighbour when it
// is blown up by a whole factor, as 64–128 px demo images are), its prompt, and its seed/device.
// Before the image exists it shows a placeholder, then the live latent preview.
#pragma once

#include <QFrame>
#include <QImage>
#include <QLabel>
#include <QPainter>
#include <QToolButton>
#include <vector>

namespace octodiff::gui {

// Paints an image as large as fits, centred, pixel-sharp when scaled up a lot.
class ImageCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit ImageCanvas(QWidget* parent = nullptr);
  void setImage(const QImage& image);
  const QImage& image() const { return image_; }
  void setOverlay(const QString& text);  // e.g. "step 3/25" on a preview
  void setPlaceholder(const QString& text);
  // Non-empty: the image is drawn blurred and dimmed under this label (a flagged image); empty:
  // drawn as it is.
  void setCover(const QString& label);
  bool covered() const { return !cover_.isEmpty(); }
  QRect imageRect() const;  // where the image is drawn
  QSize sizeHint() const override { return {160, 160}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  void paintCover(QPainter& p, const QRect& target);

  QImage image_;
  QString overlay_, placeholder_, cover_;
};

class ImageTile : public QFrame {
  Q_OBJECT
 public:
  explicit ImageTile(int index, QWidget* parent = nullptr);

  int index() const { return index_; }
  void setCaption(const QString& prompt, const QString& detail);
  QString promptText() const { return prompt_text_; }
  QString detailText() const { return detail_text_; }  // in full (the label may show it elided)
  void showPlaceholder(const QString& text);
  void showPreview(const QImage& image, int step, int steps);
  void showFinal(const QImage& image);
  // The safety checker flagged this image (GenerationResult::nsfw_flagged): it is shown blurred
  // under "Flagged by the safety checker" until clicked, then with a "flagged" badge.
  void setFlagged(bool flagged);
  bool isFlagged() const { return flagged_; }
  bool isFinal() const { return final_; }
  bool isPreview() const { return preview_; }
  const QImage& image() const { return canvas_->image(); }
  // The hover buttons (only on finished images), over the picture's top right corner: in one row,
  // or wrapped into 2 or 4 rows when the picture is too narrow for one (a small tile at 2× scale).
  void setActionsVisible(bool visible);
  QWidget* actions() const { return actions_; }
  int actionColumns() const { return action_columns_; }

 signals:
  void clicked(int index);
  void saveRequested(int index);
  void copyRequested(int index);
  void reuseRequested(int index);
  void varyRequested(int index);  // use this image as the init image (image to image)

 protected:
  void mouseReleaseEvent(QMouseEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void enterEvent(QEnterEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void updateElidedPrompt();
  void arrangeActions(int available_width);  // the fewest rows (4, 2 or 1 column) that fit
  void placeActionButtons(int columns);

  int index_;
  bool final_ = false, preview_ = false, flagged_ = false;
  QString prompt_text_;
  QString detail_text_;
  ImageCanvas* canvas_;
  QLabel *prompt_, *detail_;
  QWidget* actions_;
  std::vector<QToolButton*> action_buttons_;
  int action_columns_ = 0;
};

}  // namespace octodiff::gui
