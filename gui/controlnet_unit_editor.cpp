#include "controlnet_unit_editor.h"

#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QMimeData>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include "init_image_panel.h"
#include "run_record.h"

namespace octodiff::gui {
namespace {

QDoubleSpinBox* spinBox(const QString& name, double low, double high, double step, double value, int decimals = 2) {
  auto* box = new QDoubleSpinBox;
  box->setObjectName(name);
  box->setRange(low, high);
  box->setSingleStep(step);
  box->setDecimals(decimals);
  box->setValue(value);
  return box;
}

QString firstLocalFile(const QMimeData* mime) {
  if (!mime || !mime->hasUrls()) return {};
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile()) return url.toLocalFile();
  return {};
}

}  // namespace

QString controlNetName(const QString& path) {
  const QFileInfo info(QDir::cleanPath(path.trimmed()));
  return info.isDir() ? info.fileName() : info.completeBaseName();
}

ControlNetUnitEditor::ControlNetUnitEditor(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("controlNetUnit"));
  setFrameShape(QFrame::StyledPanel);
  setAcceptDrops(true);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(6, 4, 6, 6);
  column->setSpacing(4);
  column->addLayout(buildModelRow());
  column->addLayout(buildImageRow());
  column->addLayout(buildOptions());
  connect(&watcher_, &QFutureWatcher<QImage>::finished, this, &ControlNetUnitEditor::onPreprocessed);
  refresh();
}

ControlNetUnitEditor::~ControlNetUnitEditor() {
  pending_.waitForFinished();
}

QLayout* ControlNetUnitEditor::buildModelRow() {
  enabled_ = new QCheckBox(tr("ControlNet"));
  enabled_->setObjectName(QStringLiteral("controlNetEnabled"));
  enabled_->setChecked(true);
  enabled_->setToolTip(tr("Off: this ControlNet keeps its settings but takes no part in runs"));
  path_ = new QLineEdit;
  path_->setObjectName(QStringLiteral("controlNetPath"));
  path_->setPlaceholderText(tr("ControlNet folder or .safetensors"));
  path_->setMinimumWidth(60);
  auto* folder = new QPushButton(tr("Folder…"));
  folder->setToolTip(tr("A diffusers ControlNet folder (config.json + weights)"));
  auto* file = new QPushButton(tr("File…"));
  file->setToolTip(tr("A ControlNet in the original layout (control_*.safetensors)"));
  auto* remove = new QToolButton;
  remove->setObjectName(QStringLiteral("removeControlNet"));
  remove->setText(QStringLiteral("×"));
  remove->setToolTip(tr("Remove this ControlNet"));
  connect(enabled_, &QCheckBox::toggled, this, [this] {
    refresh();
    emit changed();
  });
  connect(path_, &QLineEdit::editingFinished, this, [this] { setModelPath(path_->text()); });
  connect(folder, &QPushButton::clicked, this, [this] { browseModel(true); });
  connect(file, &QPushButton::clicked, this, [this] { browseModel(false); });
  connect(remove, &QToolButton::clicked, this, &ControlNetUnitEditor::removeRequested);
  status_ = new QLabel;
  status_->setObjectName(QStringLiteral("controlNetStatus"));
  status_->setWordWrap(true);
  auto* top = new QHBoxLayout;
  top->addWidget(enabled_, 1);
  top->addWidget(remove);
  auto* model = new QHBoxLayout;
  model->addWidget(path_, 1);
  model->addWidget(folder);
  model->addWidget(file);
  auto* rows = new QVBoxLayout;
  rows->addLayout(top);
  rows->addLayout(model);
  rows->addWidget(status_);
  return rows;
}

QLayout* ControlNetUnitEditor::buildImageRow() {
  original_ = new ImageCanvas;
  original_->setObjectName(QStringLiteral("controlImageThumbnail"));
  original_->setFixedSize(80, 80);
  original_->setToolTip(tr("The control image as opened"));
  processed_ = new ImageCanvas;
  processed_->setObjectName(QStringLiteral("controlPreprocessedThumbnail"));
  processed_->setFixedSize(80, 80);
  processed_->setToolTip(tr("The control image as the ControlNet takes it (after the preprocessor)"));
  caption_ = new QLabel;
  caption_->setObjectName(QStringLiteral("controlImageCaption"));
  caption_->setWordWrap(true);
  auto* open = new QPushButton(tr("Control image…"));
  open->setObjectName(QStringLiteral("openControlImage"));
  open->setToolTip(tr("The image the ControlNet follows (edges, pose, depth, … or a photo to preprocess); "
                      "or drop one here"));
  connect(open, &QPushButton::clicked, this, &ControlNetUnitEditor::browseImage);
  auto* side = new QVBoxLayout;
  side->addWidget(caption_);
  side->addWidget(open, 0, Qt::AlignLeft);
  side->addStretch(1);
  auto* row = new QHBoxLayout;
  row->addWidget(original_, 0, Qt::AlignTop);
  row->addWidget(processed_, 0, Qt::AlignTop);
  row->addLayout(side, 1);
  return row;
}

QLayout* ControlNetUnitEditor::buildOptions() {
  preprocessor_ = new QComboBox;
  preprocessor_->setObjectName(QStringLiteral("controlPreprocessor"));
  preprocessor_->addItem(tr("none"), static_cast<int>(ControlPreprocessor::None));
  preprocessor_->addItem(tr("canny (edges)"), static_cast<int>(ControlPreprocessor::Canny));
  low_ = spinBox(QStringLiteral("cannyLow"), 0, 1000, 10, 100, 0);
  high_ = spinBox(QStringLiteral("cannyHigh"), 0, 1000, 10, 200, 0);
  low_->setToolTip(tr("Canny's low threshold: weaker gradients than this are never edges"));
  high_->setToolTip(tr("Canny's high threshold: gradients above this start an edge"));
  scale_ = spinBox(QStringLiteral("controlScale"), 0, 2, 0.05, 1.0);
  scale_->setToolTip(tr("Conditioning scale: how strongly the ControlNet steers (0: not at all)"));
  start_ = spinBox(QStringLiteral("controlStart"), 0, 1, 0.05, 0.0);
  end_ = spinBox(QStringLiteral("controlEnd"), 0, 1, 0.05, 1.0);
  start_->setToolTip(tr("The fraction of the steps before the ControlNet starts acting"));
  end_->setToolTip(tr("The fraction of the steps after which it stops"));
  auto* pre_row = new QHBoxLayout;
  preprocessor_->setToolTip(tr("none: the image as it is (an edge map, a pose, …); canny: OpenCV's edges of it"));
  pre_row->addWidget(preprocessor_);
  pre_row->addStretch(1);
  auto* canny_row = new QHBoxLayout;
  canny_row->addWidget(new QLabel(tr("low")));
  canny_row->addWidget(low_);
  canny_row->addWidget(new QLabel(tr("high")));
  canny_row->addWidget(high_);
  canny_row->addStretch(1);
  auto* weight_row = new QHBoxLayout;
  weight_row->addWidget(scale_);
  weight_row->addWidget(new QLabel(tr("from")));
  weight_row->addWidget(start_);
  weight_row->addWidget(new QLabel(tr("to")));
  weight_row->addWidget(end_);
  weight_row->addStretch(1);
  auto* form = new QFormLayout;
  form->setVerticalSpacing(4);
  form->addRow(tr("Preprocess"), pre_row);
  form->addRow(tr("Thresholds"), canny_row);
  form->addRow(tr("Scale"), weight_row);
  auto repreprocess = [this] {
    preprocess();
    refresh();
    emit changed();
  };
  connect(preprocessor_, &QComboBox::currentIndexChanged, this, repreprocess);
  connect(low_, &QDoubleSpinBox::valueChanged, this, repreprocess);
  connect(high_, &QDoubleSpinBox::valueChanged, this, repreprocess);
  for (QDoubleSpinBox* box : {scale_, start_, end_}) connect(box, &QDoubleSpinBox::valueChanged, this, &ControlNetUnitEditor::changed);
  return form;
}

void ControlNetUnitEditor::setNumber(int number) {
  enabled_->setText(tr("ControlNet %1").arg(number));
}

ControlNetUnitSettings ControlNetUnitEditor::settings() const {
  ControlNetUnitSettings s;
  s.enabled = enabled_->isChecked();
  s.path = modelPath();
  s.preprocessor = static_cast<ControlPreprocessor>(preprocessor_->currentData().toInt());
  s.thresholds = {low_->value(), high_->value()};
  s.scale = scale_->value();
  s.start = start_->value();
  s.end = end_->value();
  return s;
}

void ControlNetUnitEditor::setSettings(const ControlNetUnitSettings& s) {
  enabled_->setChecked(s.enabled);
  preprocessor_->setCurrentIndex(std::max(0, preprocessor_->findData(static_cast<int>(s.preprocessor))));
  low_->setValue(s.thresholds.low);
  high_->setValue(s.thresholds.high);
  scale_->setValue(s.scale);
  start_->setValue(s.start);
  end_->setValue(s.end);
  setModelPath(s.path);
}

void ControlNetUnitEditor::setModelPath(const QString& path) {
  const QString p = path.trimmed();
  path_->setText(p);
  if (p == last_path_) return;
  last_path_ = p;
  setModelStatus(p.isEmpty() ? tr("Choose a ControlNet folder or file.") : QString(), false);
  emit modelPathChanged(p);
  emit changed();
}

void ControlNetUnitEditor::setModelStatus(const QString& text, bool error) {
  status_->setText(text);
  status_->setStyleSheet(error ? QStringLiteral("color: #b00020;") : QStringLiteral("color: palette(mid);"));
}

void ControlNetUnitEditor::setControlImage(const QImage& image, const QString& origin) {
  image_ = image.isNull() ? QImage() : image.convertToFormat(QImage::Format_RGB888);
  origin_ = image_.isNull() ? QString() : origin;
  preprocess();
  refresh();
  emit changed();
}

bool ControlNetUnitEditor::openImage(const QString& path) {
  QString error;
  const QImage image = readInitImage(path, &error);  // any image Qt reads, flattened to RGB
  if (image.isNull()) {
    emit errorOccurred(tr("Could not use this file as a control image:\n%1").arg(error));
    return false;
  }
  setControlImage(image, QFileInfo(path).fileName());
  return true;
}

QImage ControlNetUnitEditor::preprocessedImage() const {
  if (image_.isNull()) return {};
  return pending_.result();  // waits when it is still running (milliseconds)
}

void ControlNetUnitEditor::preprocess() {
  preprocess_error_.clear();
  if (image_.isNull()) {
    pending_ = {};
    return;
  }
  const ControlNetUnitSettings s = settings();
  const QImage image = image_;
  pending_ = QtConcurrent::run([image, s]() -> QImage {
    if (s.preprocessor == ControlPreprocessor::None) return image;
    try {
      return toQImage(canny_edges(toImage8(image), s.thresholds));
    } catch (const std::exception&) {
      return {};  // onPreprocessed reports it
    }
  });
  watcher_.setFuture(pending_);
}

void ControlNetUnitEditor::onPreprocessed() {
  if (!hasImage() || !pending_.isFinished()) return;
  if (pending_.result().isNull())
    preprocess_error_ = tr("the preprocessor failed on this image (%1 × %2)").arg(image_.width()).arg(image_.height());
  refresh();
}

void ControlNetUnitEditor::refresh() {
  const bool canny = preprocessor_->currentData().toInt() == static_cast<int>(ControlPreprocessor::Canny);
  low_->setEnabled(canny);
  high_->setEnabled(canny);
  if (image_.isNull()) {
    original_->setPlaceholder(tr("no image"));
    processed_->setPlaceholder(QString());
    caption_->setText(tr("No control image: open or drop one."));
    return;
  }
  original_->setImage(image_);
  if (pending_.isFinished() && !pending_.result().isNull())
    processed_->setImage(pending_.result());
  else
    processed_->setPlaceholder(preprocess_error_.isEmpty() ? tr("…") : tr("failed"));
  caption_->setText(tr("%1\n%2 × %3").arg(origin_).arg(image_.width()).arg(image_.height()));
}

void ControlNetUnitEditor::browseModel(bool folder) {
  const QString start = QFileInfo(modelPath()).absolutePath();
  const QString path = folder ? QFileDialog::getExistingDirectory(this, tr("ControlNet folder"), start)
                              : QFileDialog::getOpenFileName(this, tr("ControlNet file"), start,
                                                             tr("ControlNet weights (*.safetensors);;All files (*)"));
  if (!path.isEmpty()) setModelPath(path);
}

void ControlNetUnitEditor::browseImage() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open a control image"), QFileInfo(origin_).absolutePath(),
      tr("Images (*.png *.jpg *.jpeg *.bmp *.webp *.gif *.tif *.tiff *.ppm);;All files (*)"));
  if (!path.isEmpty()) openImage(path);
}

void ControlNetUnitEditor::dragEnterEvent(QDragEnterEvent* event) {
  if (!firstLocalFile(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void ControlNetUnitEditor::dropEvent(QDropEvent* event) {
  const QString path = firstLocalFile(event->mimeData());
  if (path.isEmpty()) return;
  event->acceptProposedAction();
  openImage(path);
}

}  // namespace octodiff::gui
