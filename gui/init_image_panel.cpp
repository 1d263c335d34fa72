#include "init_image_panel.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QImageReader>
#include <QMimeData>
#include <QPainter>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "run_record.h"

namespace octodiff::gui {
namespace {

QString firstLocalFile(const QMimeData* mime) {
  if (!mime || !mime->hasUrls()) return {};
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile()) return url.toLocalFile();
  return {};
}

QString readableFormats() {
  QStringList names;
  for (const QByteArray& f : QImageReader::supportedImageFormats()) names << QString::fromLatin1(f).toUpper();
  names.removeDuplicates();
  return names.join(QStringLiteral(", "));
}

QImage flattenedRgb(const QImage& image) {
  if (!image.hasAlphaChannel()) return image.convertToFormat(QImage::Format_RGB888);
  QImage out(image.size(), QImage::Format_RGB888);
  out.fill(Qt::white);
  QPainter p(&out);
  p.drawImage(0, 0, image);
  p.end();
  return out;
}

}  // namespace

QImage readInitImage(const QString& path, QString* error) {
  const QString name = QFileInfo(path).fileName();
  if (!QFileInfo(path).isFile()) {
    *error = QObject::tr("'%1' is not a file").arg(path);
    return {};
  }
  QImageReader reader(path);
  reader.setAutoTransform(true);
  if (!reader.canRead()) {
    *error = QObject::tr("'%1' is not an image Octodiff can read (formats: %2)").arg(name, readableFormats());
    return {};
  }
  const QImage image = reader.read();
  if (image.isNull()) {
    *error = QObject::tr("'%1' could not be read as an image: %2").arg(name, reader.errorString());
    return {};
  }
  if (image.width() > kMaxImageSide || image.height() > kMaxImageSide) {
    *error = QObject::tr("'%1' is %2 × %3 pixels, larger than Octodiff handles")
                 .arg(name)
                 .arg(image.width())
                 .arg(image.height());
    return {};
  }
  return flattenedRgb(image);
}

InitImagePanel::InitImagePanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("initImagePanel"));
  setAcceptDrops(true);
  editor_ = new MaskEditor;
  connect(editor_, &MaskEditor::fileDropped, this, &InitImagePanel::openFile);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(4);
  column->addWidget(buildImageRow());
  options_ = buildOptions();
  column->addWidget(options_);
  connect(editor_, &MaskEditor::maskChanged, this, [this] {
    refresh();
    emit changed();
  });
  refresh();
}

QWidget* InitImagePanel::buildImageRow() {
  thumbnail_ = new ImageCanvas;
  thumbnail_->setObjectName(QStringLiteral("initThumbnail"));
  thumbnail_->setFixedSize(96, 96);
  thumbnail_->setPlaceholder(tr("no image"));
  caption_ = new QLabel;
  caption_->setObjectName(QStringLiteral("initCaption"));
  caption_->setWordWrap(true);
  hint_ =
      new QLabel(tr("Generate makes images from text. For image to image, Vary a result (hover a tile), "
                    "open an image or drop one here."));
  hint_->setWordWrap(true);
  hint_->setStyleSheet(QStringLiteral("color: palette(mid);"));
  open_ = new QPushButton(tr("Open image…"));
  open_->setObjectName(QStringLiteral("openInitImage"));
  open_->setToolTip(tr("Start from an image file (PNG, JPEG, …)"));
  clear_ = new QToolButton;
  clear_->setObjectName(QStringLiteral("clearInitImage"));
  clear_->setText(QStringLiteral("×"));
  clear_->setToolTip(tr("Remove the init image (and its mask): back to text to image"));
  paint_ = new QPushButton(tr("Paint mask…"));
  paint_->setObjectName(QStringLiteral("paintMask"));
  paint_->setToolTip(tr("Paint the area to repaint over the image (the Mask tab)"));
  connect(open_, &QPushButton::clicked, this, &InitImagePanel::openRequested);
  connect(clear_, &QToolButton::clicked, this, &InitImagePanel::clearInitImage);
  connect(paint_, &QPushButton::clicked, this, &InitImagePanel::maskEditRequested);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(open_);
  buttons->addWidget(paint_);
  buttons->addWidget(clear_);
  buttons->addStretch(1);
  auto* side = new QVBoxLayout;
  side->addWidget(caption_);
  side->addWidget(hint_);
  side->addLayout(buttons);
  side->addStretch(1);
  auto* row = new QWidget;
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(thumbnail_, 0, Qt::AlignTop);
  layout->addLayout(side, 1);
  return row;
}

QWidget* InitImagePanel::buildOptions() {
  strength_ = new QSlider(Qt::Horizontal);
  strength_->setObjectName(QStringLiteral("strength"));
  strength_->setRange(5, 100);  // hundredths: 0.05 … 1.0
  strength_->setValue(static_cast<int>(kDefaultStrength * 100));
  strength_->setToolTip(
      tr("Denoising strength: how much of the schedule runs from the image. Low keeps the "
         "image, 1.0 ignores it (only its size remains)."));
  strength_label_ = new QLabel;
  strength_label_->setMinimumWidth(32);
  auto* strength_row = new QHBoxLayout;
  strength_row->addWidget(strength_, 1);
  strength_row->addWidget(strength_label_);

  mode_ = new QComboBox;
  mode_->setObjectName(QStringLiteral("varyMode"));
  mode_->addItem(tr("Every device a variation"), static_cast<int>(VaryMode::Variations));
  mode_->addItem(tr("Seed comparison of one image"), static_cast<int>(VaryMode::SeedComparison));
  mode_->setToolTip(
      tr("Every device a variation: one run, the image on every device, each device its own "
         "noise.\nSeed comparison: one image per seed listed in the Seed comparison tab."));
  variations_ = new QSpinBox;
  variations_->setObjectName(QStringLiteral("variations"));
  variations_->setRange(1, 8);
  variations_->setValue(kDefaultVariations);
  variations_->setSuffix(tr(" devices"));
  variations_->setToolTip(
      tr("With one prompt: how many variations (devices). With several prompts, each "
         "prompt's device is a variation."));
  auto* mode_row = new QHBoxLayout;
  mode_row->addWidget(mode_, 1);
  mode_row->addWidget(variations_);

  auto* box = new QWidget;
  auto* form = new QFormLayout(box);
  form->setContentsMargins(0, 0, 0, 0);
  form->setVerticalSpacing(4);
  form->addRow(tr("Strength"), strength_row);
  form->addRow(tr("Vary as"), mode_row);
  form->addRow(buildInpaintOptions());

  auto changed = [this] {
    refresh();
    emit this->changed();
  };
  connect(strength_, &QSlider::valueChanged, this, changed);
  connect(mode_, &QComboBox::currentIndexChanged, this, changed);
  connect(variations_, &QSpinBox::valueChanged, this, changed);
  return box;
}

QWidget* InitImagePanel::buildInpaintOptions() {
  mask_status_ = new QLabel;
  mask_status_->setObjectName(QStringLiteral("maskSummary"));
  mask_blur_ = new QSpinBox;
  mask_blur_->setObjectName(QStringLiteral("maskBlur"));
  mask_blur_->setRange(0, 64);
  mask_blur_->setValue(kDefaultMaskBlur);
  mask_blur_->setSuffix(tr(" px"));
  mask_blur_->setToolTip(tr("Mask blur: softens the mask's edge (Gaussian radius in pixels)"));
  area_ = new QComboBox;
  area_->setObjectName(QStringLiteral("inpaintArea"));
  area_->addItem(tr("Whole picture"), false);
  area_->addItem(tr("Only masked"), true);
  area_->setToolTip(tr("Only masked: repaint a crop around the mask at the run's size, then paste it back"));
  padding_ = new QSpinBox;
  padding_->setObjectName(QStringLiteral("maskedPadding"));
  padding_->setRange(0, 256);
  padding_->setValue(32);
  padding_->setSuffix(tr(" px"));
  padding_->setToolTip(tr("Only masked: pixels around the mask's bounding box in the crop"));

  auto* box = new QWidget;
  auto* form = new QFormLayout(box);
  form->setContentsMargins(0, 4, 0, 0);
  form->setVerticalSpacing(4);
  auto* area_row = new QHBoxLayout;
  area_row->addWidget(area_, 1);
  area_row->addWidget(new QLabel(tr("Padding")));
  area_row->addWidget(padding_);
  form->addRow(tr("Mask"), mask_status_);
  form->addRow(tr("Mask blur"), mask_blur_);
  form->addRow(tr("Inpaint area"), area_row);
  auto changed = [this] {
    refresh();
    emit this->changed();
  };
  connect(mask_blur_, &QSpinBox::valueChanged, this, changed);
  connect(area_, &QComboBox::currentIndexChanged, this, changed);
  connect(padding_, &QSpinBox::valueChanged, this, changed);
  return box;
}

void InitImagePanel::refresh() {
  const bool has = hasInitImage();
  options_->setVisible(has);
  hint_->setVisible(!has);
  clear_->setEnabled(has);
  paint_->setEnabled(has);
  strength_label_->setText(QString::number(strength(), 'f', 2));
  variations_->setEnabled(mode() == VaryMode::Variations);
  padding_->setEnabled(area_->currentData().toBool());
  if (!has) {
    thumbnail_->setPlaceholder(tr("no image"));
    caption_->setText(tr("No init image"));
    return;
  }
  thumbnail_->setImage(editor_->overlaid());
  QString caption = tr("%1\n%2 × %3").arg(origin_).arg(initImage().width()).arg(initImage().height());
  if (const QSize run = runSize(0, 0); run != initImage().size())
    caption +=
        tr(", runs at %1 × %2 (the model's size) unless Size is set").arg(run.width()).arg(run.height());
  caption_->setText(caption);
  const double f = editor_->maskedFraction();
  mask_status_->setText(f > 0 ? tr("%1 % of the image is repainted").arg(100 * f, 0, 'f', 1)
                              : tr("none: the whole image is varied"));
}

void InitImagePanel::setInitImage(const QImage& image, const QString& origin) {
  origin_ = image.isNull() ? QString() : origin;
  editor_->setImage(image);  // maskChanged → refresh, changed
  emit initImageChanged();
}

void InitImagePanel::clearInitImage() {
  if (!hasInitImage()) return;
  setInitImage(QImage(), QString());
}

bool InitImagePanel::openFile(const QString& path) {
  QString error;
  const QImage image = readInitImage(path, &error);
  if (image.isNull()) {
    emit errorOccurred(tr("Could not use this file as the init image:\n%1").arg(error));
    return false;
  }
  setInitImage(image, QFileInfo(path).fileName());
  return true;
}

void InitImagePanel::setStrength(double strength) {
  strength_->setValue(static_cast<int>(std::lround(std::clamp(strength, 0.05, 1.0) * 100)));
}

void InitImagePanel::setMode(VaryMode mode) {
  mode_->setCurrentIndex(std::max(0, mode_->findData(static_cast<int>(mode))));
}

InitImageSettings InitImagePanel::settings() const {
  InitImageSettings s;
  s.strength = strength();
  s.mask_blur = mask_blur_->value();
  s.only_masked = area_->currentData().toBool();
  s.masked_padding = padding_->value();
  return s;
}

void InitImagePanel::setSettings(const InitImageSettings& s) {
  if (s.strength) setStrength(*s.strength);
  if (s.mask_blur) mask_blur_->setValue(*s.mask_blur);
  if (s.only_masked) area_->setCurrentIndex(*s.only_masked ? 1 : 0);
  if (s.masked_padding) padding_->setValue(*s.masked_padding);
}

void InitImagePanel::setModelSize(int defaultWidth, int defaultHeight, int multiple) {
  model_size_ = QSize(defaultWidth, defaultHeight);
  model_multiple_ = std::max(1, multiple);
  refresh();
}

QSize InitImagePanel::runSize(int width, int height) const {
  const QSize own = initImage().size();
  if (own.isEmpty()) return {};
  if (width > 0 && height > 0) return {width, height};
  if (width > 0)
    return {width, std::max(1, static_cast<int>(std::lround(double(width) * own.height() / own.width())))};
  if (height > 0)
    return {std::max(1, static_cast<int>(std::lround(double(height) * own.width() / own.height()))), height};
  const double area = double(model_size_.width()) * model_size_.height();
  if (model_size_.isEmpty() || double(own.width()) * own.height() <= area) return own;
  const double scale = std::sqrt(area / (double(own.width()) * own.height()));
  auto side = [&](int s) {
    return std::max(model_multiple_, int(s * scale) / model_multiple_ * model_multiple_);
  };
  return {side(own.width()), side(own.height())};
}

void InitImagePanel::applyTo(GenerationRequest* r) const {
  if (!hasInitImage()) return;
  QImage image = initImage();
  QImage mask = editor_->mask();
  const QSize size = runSize(r->width, r->height);
  if (size != image.size()) {
    image = image.scaled(size, Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
    mask = mask.scaled(size, Qt::IgnoreAspectRatio, Qt::FastTransformation);
  }
  r->init_images = {toImage8(image)};
  r->strength = strength();
  if (editor_->hasMask()) {
    r->masks = {toImage8(mask)};
    r->mask_blur = mask_blur_->value();
    r->inpaint_only_masked = area_->currentData().toBool();
    r->only_masked_padding = padding_->value();
  }
  if (mode() == VaryMode::Variations && r->prompts.size() == 1) r->devices = variations();
}

void InitImagePanel::dragEnterEvent(QDragEnterEvent* event) {
  if (!firstLocalFile(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void InitImagePanel::dropEvent(QDropEvent* event) {
  const QString path = firstLocalFile(event->mimeData());
  if (path.isEmpty()) return;
  event->acceptProposedAction();
  openFile(path);
}

}  // namespace octodiff::gui
