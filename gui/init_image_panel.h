// InitImagePanel: the image-to-image part of the form — the init image (from "Vary" on a result,
// an opened file or one dropped on the panel) as a thumbnail with a clear (×) button, the
// strength slider, how Generate varies it (every device a variation, or a seed comparison of one
// image), and the inpainting options for a mask painted in its MaskEditor (shown in the main
// window's "Mask" tab). applyTo() writes all of it into a GenerationRequest; without an init
// image it writes nothing and Generate stays text-to-image.
#pragma once

#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QToolButton>
#include <QWidget>

#include "image_metadata_io.h"
#include "image_tile.h"
#include "mask_editor.h"
#include "pipeline/generation.h"

namespace octodiff::gui {

// How Generate uses the init image.
enum class VaryMode {
  Variations,      // one run; every device starts from the image with its own noise
  SeedComparison,  // a seed sweep: one device, one image per seed of the Seed comparison tab
};

// Reads an image file for use as an init image: any format Qt reads (PNG, JPEG, BMP, WebP, …),
// EXIF orientation applied, transparency flattened onto white, as RGB888. A null image and
// `error` (naming the file) when it is not a readable image.
QImage readInitImage(const QString& path, QString* error);

class InitImagePanel : public QWidget {
  Q_OBJECT
 public:
  explicit InitImagePanel(QWidget* parent = nullptr);

  static constexpr double kDefaultStrength = 0.6;
  static constexpr int kDefaultVariations = 4;
  static constexpr int kDefaultMaskBlur = 4;  // A1111's default

  bool hasInitImage() const { return editor_->hasImage(); }
  const QImage& initImage() const { return editor_->image(); }
  QString origin() const { return origin_; }
  // A new init image (`origin`: where it came from, shown under the thumbnail); clears the mask.
  void setInitImage(const QImage& image, const QString& origin);
  // Loads `path` as the init image; false, with errorOccurred, when it is not a readable image.
  bool openFile(const QString& path);
  MaskEditor* maskEditor() const { return editor_; }

  double strength() const { return strength_->value() / 100.0; }
  void setStrength(double strength);
  VaryMode mode() const { return static_cast<VaryMode>(mode_->currentData().toInt()); }
  void setMode(VaryMode mode);
  int variations() const { return variations_->value(); }
  void setVariations(int n) { variations_->setValue(n); }
  // Generate should run a seed comparison of the init image rather than one run.
  bool seedComparisonWanted() const { return hasInitImage() && mode() == VaryMode::SeedComparison; }

  // The strength and inpainting options (restored from PNG metadata or a run).
  InitImageSettings settings() const;
  void setSettings(const InitImageSettings& settings);

  // The loaded model's default size and the multiple its sizes must be of (SettingsPanel's).
  void setModelSize(int defaultWidth, int defaultHeight, int multiple);
  // The size the init image runs at for a request with this width × height: those when set (one
  // of them: the other keeps the image's aspect); else the image's own size, or — when it has
  // more pixels than the model's default size — the model's default area with the image's
  // aspect, sides floored to the model's multiple (a photo does not become a 4000-pixel run).
  QSize runSize(int width, int height) const;

  // Image-to-image (and inpainting when a mask is painted) for `request`, whose prompts are set:
  // init_images, strength, masks and their options; in Variations mode a single prompt runs on
  // variations() devices. The image and mask are resized to runSize() when it differs from the
  // image's size. Nothing when there is no image.
  void applyTo(GenerationRequest* request) const;

  QSlider* strengthSlider() const { return strength_; }
  QComboBox* modeBox() const { return mode_; }
  QSpinBox* variationsBox() const { return variations_; }
  QSpinBox* maskBlurBox() const { return mask_blur_; }
  QComboBox* inpaintAreaBox() const { return area_; }
  QSpinBox* paddingBox() const { return padding_; }
  QToolButton* clearButton() const { return clear_; }
  QPushButton* openButton() const { return open_; }
  QPushButton* paintMaskButton() const { return paint_; }
  ImageCanvas* thumbnail() const { return thumbnail_; }

 public slots:
  void clearInitImage();

 signals:
  void initImageChanged();
  void changed();  // any setting or the mask changed
  void openRequested();
  void maskEditRequested();
  void errorOccurred(const QString& message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  QWidget* buildImageRow();
  QWidget* buildOptions();
  QWidget* buildInpaintOptions();
  void refresh();

  MaskEditor* editor_;  // owned here, shown by the main window in its own tab
  QSize model_size_;    // the model's default size (empty: no model yet)
  int model_multiple_ = 8;
  QString origin_;
  ImageCanvas* thumbnail_;
  QLabel *caption_, *hint_, *strength_label_, *mask_status_;
  QToolButton* clear_;
  QPushButton *open_, *paint_;
  QWidget* options_;
  QSlider* strength_;
  QComboBox *mode_, *area_;
  QSpinBox *variations_, *mask_blur_, *padding_;
};

}  // namespace octodiff::gui
