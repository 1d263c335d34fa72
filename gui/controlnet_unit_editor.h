// ControlNetUnitEditor: one ControlNet of the ControlNet panel (A1111's "ControlNet unit"): an
// on/off box, the model (a diffusers folder or an original single file), the control image (opened
// or dropped) with its preprocessed version beside it, the preprocessor (none, or OpenCV's Canny
// with its low and high thresholds: preprocess/canny.h), the conditioning scale and the part of
// the steps it acts in (start, end). The preprocessing runs off the UI thread whenever the image
// or the preprocessor changes; the thumbnail follows when it is done.
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFrame>
#include <QFuture>
#include <QFutureWatcher>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QToolButton>

#include "image_tile.h"
#include "preprocess/canny.h"

namespace octodiff::gui {

// What a unit holds besides its image (what PNG metadata records of it, but for the model's path:
// metadata has its name).
struct ControlNetUnitSettings {
  bool enabled = true;
  QString path;
  ControlPreprocessor preprocessor = ControlPreprocessor::None;
  CannyThresholds thresholds;
  double scale = 1.0, start = 0.0, end = 1.0;
};

// How metadata names a ControlNet, as octodiff-cli does: a folder's name, a file's stem.
QString controlNetName(const QString& path);

class ControlNetUnitEditor : public QFrame {
  Q_OBJECT
 public:
  explicit ControlNetUnitEditor(QWidget* parent = nullptr);
  ~ControlNetUnitEditor() override;  // waits for a preprocessing in flight

  void setNumber(int number);  // "ControlNet 1", …
  ControlNetUnitSettings settings() const;
  void setSettings(const ControlNetUnitSettings& settings);
  bool isOn() const { return enabled_->isChecked(); }  // its box is ticked: it takes part in runs
  QString modelPath() const { return path_->text().trimmed(); }
  void setModelPath(const QString& path);  // modelPathChanged when it differs
  // The model's state under the path: "ready", "loading…" or an error (shown in red).
  void setModelStatus(const QString& text, bool error);
  QString modelStatus() const { return status_->text(); }

  bool hasImage() const { return !image_.isNull(); }
  const QImage& controlImage() const { return image_; }  // the user's, RGB888
  QString imageOrigin() const { return origin_; }
  void setControlImage(const QImage& image, const QString& origin);
  // Reads `path` as the control image; false, with errorOccurred, when it is not an image.
  bool openImage(const QString& path);
  // The control image as the run takes it: preprocessed (waits for a preprocessing in flight).
  // Null without an image, or when the preprocessor failed (preprocessError() says why).
  QImage preprocessedImage() const;
  QString preprocessError() const { return preprocess_error_; }

  QCheckBox* enabledBox() const { return enabled_; }
  QLineEdit* pathEdit() const { return path_; }
  QComboBox* preprocessorBox() const { return preprocessor_; }
  QDoubleSpinBox* lowThresholdBox() const { return low_; }
  QDoubleSpinBox* highThresholdBox() const { return high_; }
  QDoubleSpinBox* scaleBox() const { return scale_; }
  QDoubleSpinBox* startBox() const { return start_; }
  QDoubleSpinBox* endBox() const { return end_; }
  ImageCanvas* imageThumbnail() const { return original_; }
  ImageCanvas* preprocessedThumbnail() const { return processed_; }

 signals:
  void changed();
  void modelPathChanged(const QString& path);
  void removeRequested();
  void errorOccurred(const QString& message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  QLayout* buildModelRow();
  QLayout* buildImageRow();
  QLayout* buildOptions();
  void browseModel(bool folder);
  void browseImage();
  void preprocess();  // starts preprocessing the image off the UI thread
  void onPreprocessed();
  void refresh();

  QCheckBox* enabled_;
  QLineEdit* path_;
  QString last_path_;
  QLabel *status_, *caption_;
  ImageCanvas *original_, *processed_;
  QComboBox* preprocessor_;
  QDoubleSpinBox *low_, *high_, *scale_, *start_, *end_;
  QImage image_;
  QString origin_;
  QFuture<QImage> pending_;  // the preprocessed image of the current image and settings
  QFutureWatcher<QImage> watcher_;
  mutable QString preprocess_error_;
};

}  // namespace octodiff::gui
