#include "image_dialog.h"

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>
#include <algorithm>

#include "pipeline/metadata.h"

namespace octodiff::gui {

ImageDialog::ImageDialog(const RunPtr& run, int index, QWidget* parent)
    : QDialog(parent), run_(run), index_(index) {
  setObjectName(QStringLiteral("imageDialog"));
  setAttribute(Qt::WA_DeleteOnClose);
  const int B = run->batch();
  setWindowTitle(tr("Image %1 of run #%2 — seed %3, device %4/%5")
                     .arg(index + 1)
                     .arg(run->number)
                     .arg(run->seed())
                     .arg(index / B + 1)
                     .arg(run->devices()));

  picture_ = new QLabel;
  picture_->setObjectName(QStringLiteral("enlargedImage"));
  picture_->setAlignment(Qt::AlignCenter);
  auto* scroll = new QScrollArea;
  scroll->setWidget(picture_);
  scroll->setWidgetResizable(true);
  picture_->setStyleSheet(QStringLiteral("background: #202024;"));

  zoom_ = new QComboBox;
  for (int z : {1, 2, 3, 4, 6, 8, 10, 12, 16}) zoom_->addItem(QStringLiteral("%1×").arg(z), z);
  smooth_ = new QCheckBox(tr("Smooth"));
  smooth_->setToolTip(tr("Bilinear instead of nearest-neighbour scaling"));
  const QImage& img = run->images.at(index);
  setZoom(fittingZoom(img.size(), QSize(704, 704)));
  connect(zoom_, &QComboBox::currentIndexChanged, this, &ImageDialog::render);
  connect(smooth_, &QCheckBox::toggled, this, &ImageDialog::render);

  const ImageMetadata meta = describe_image(run->request, run->result, *run->model, index / B, index % B);
  auto* info =
      new QLabel(QString::fromStdString(a1111_parameters(meta)).toHtmlEscaped().replace('\n', "<br>"));
  info->setWordWrap(true);
  info->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Zoom")));
  controls->addWidget(zoom_);
  controls->addWidget(smooth_);
  controls->addStretch(1);
  auto add = [&](const QString& text, void (ImageDialog::*signal)(const RunPtr&, int)) {
    auto* b = new QPushButton(text);
    connect(b, &QPushButton::clicked, this, [this, signal] { emit(this->*signal)(run_, index_); });
    controls->addWidget(b);
  };
  add(tr("Save…"), &ImageDialog::saveRequested);
  add(tr("Copy"), &ImageDialog::copyRequested);
  add(tr("Reuse settings"), &ImageDialog::reuseRequested);
  add(tr("Vary"), &ImageDialog::varyRequested);
  auto* close = new QPushButton(tr("Close"));
  connect(close, &QPushButton::clicked, this, &QDialog::close);
  controls->addWidget(close);

  auto* column = new QVBoxLayout(this);
  column->addWidget(scroll, 1);
  column->addWidget(info);
  column->addLayout(controls);
  const QSize shown = shownSize();
  resize(std::clamp(shown.width() + 80, 480, 1100), std::clamp(shown.height() + 200, 360, 950));
}

int ImageDialog::fittingZoom(const QSize& image, const QSize& room) {
  if (image.isEmpty()) return 1;
  const int z = std::min(room.width() / image.width(), room.height() / image.height());
  return std::clamp(z, 1, 16);
}

int ImageDialog::zoom() const {
  return zoom_->currentData().toInt();
}

void ImageDialog::setZoom(int factor) {
  int best = 0;
  for (int i = 0; i < zoom_->count(); ++i)
    if (zoom_->itemData(i).toInt() <= factor) best = i;
  zoom_->setCurrentIndex(best);
  render();
}

QSize ImageDialog::shownSize() const {
  return picture_->pixmap().size();
}

void ImageDialog::render() {
  const QImage& img = run_->images.at(index_);
  const QSize size = img.size() * zoom();
  picture_->setPixmap(QPixmap::fromImage(
      img.scaled(size, Qt::KeepAspectRatio, smooth() ? Qt::SmoothTransformation : Qt::FastTransformation)));
}

}  // namespace octodiff::gui
