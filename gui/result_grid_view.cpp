#include "result_grid_view.h"

#include <QVBoxLayout>

#include "io/image.h"

namespace octodiff::gui {

ResultGridView::ResultGridView(QWidget* parent) : QWidget(parent) {
  title_ = new QLabel;
  title_->setObjectName(QStringLiteral("gridTitle"));
  title_->setAlignment(Qt::AlignCenter);
  QFont f = title_->font();
  f.setBold(true);
  f.setPointSizeF(f.pointSizeF() * 1.15);
  title_->setFont(f);
  title_->setVisible(false);
  empty_ = new QLabel;
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setWordWrap(true);
  empty_->setStyleSheet(QStringLiteral("color: palette(mid); font-size: 13pt;"));
  tiles_area_ = new QWidget;
  grid_ = new QGridLayout(tiles_area_);
  grid_->setContentsMargins(0, 0, 0, 0);
  grid_->setSpacing(6);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->addWidget(title_);
  column->addWidget(empty_, 1);
  column->addWidget(tiles_area_, 1);
  clear(
      tr("Type up to eight prompts and press Generate.\nEach prompt runs on its own device; the images "
         "appear here, 2 × 4 for eight."));
}

void ResultGridView::setTitle(const QString& title) {
  title_->setText(title);
  title_->setVisible(!title.isEmpty());
}

void ResultGridView::clear(const QString& message) {
  rebuild(0);
  run_.reset();
  empty_->setText(message);
  empty_->setVisible(true);
  tiles_area_->setVisible(false);
}

QString ResultGridView::detail(int64_t seed, int index, int devices, int batch) {
  const int d = index / std::max(1, batch), b = index % std::max(1, batch);
  QString s = tr("seed %1 · device %2/%3").arg(seed).arg(d + 1).arg(devices);
  if (batch > 1) s += tr(" · #%1").arg(b + 1);
  return s;
}

void ResultGridView::rebuild(int count) {
  for (ImageTile* t : tiles_) {
    grid_->removeWidget(t);
    t->hide();
    t->deleteLater();
  }
  tiles_.clear();
  for (int r = 0; r < grid_->rowCount(); ++r) grid_->setRowStretch(r, 0);
  for (int c = 0; c < grid_->columnCount(); ++c) grid_->setColumnStretch(c, 0);
  rows_ = cols_ = 0;
  if (count <= 0) return;
  grid_shape(count, &rows_, &cols_);
  for (int i = 0; i < count; ++i) {
    auto* tile = new ImageTile(i);
    connect(tile, &ImageTile::clicked, this, [this](int k) { emit enlargeRequested(run_, k); });
    connect(tile, &ImageTile::saveRequested, this, [this](int k) { emit saveRequested(run_, k); });
    connect(tile, &ImageTile::copyRequested, this, [this](int k) { emit copyRequested(run_, k); });
    connect(tile, &ImageTile::reuseRequested, this, [this](int k) { emit reuseRequested(run_, k); });
    connect(tile, &ImageTile::varyRequested, this, [this](int k) { emit varyRequested(run_, k); });
    grid_->addWidget(tile, i / cols_, i % cols_);
    tiles_.push_back(tile);
  }
  if (sized_) {
    sizeTiles(image_size_);
  } else {
    for (int r = 0; r < rows_; ++r) grid_->setRowStretch(r, 1);
    for (int c = 0; c < cols_; ++c) grid_->setColumnStretch(c, 1);
  }
  empty_->setVisible(false);
  tiles_area_->setVisible(true);
}

void ResultGridView::beginRun(const QStringList& prompts, int devices, int batch, int64_t seed) {
  devices_ = std::max(1, devices);
  batch_ = std::max(1, batch);
  run_.reset();
  rebuild(devices_ * batch_);
  for (int i = 0; i < tileCount(); ++i) {
    tiles_[i]->setCaption(prompts.value(i, prompts.value(0)), detail(seed, i, devices_, batch_));
    tiles_[i]->showPlaceholder(tr("waiting…"));
  }
}

void ResultGridView::showPreview(int device, int step, int steps, const QImage& image) {
  const int i = device * batch_;
  if (run_ || i < 0 || i >= tileCount()) return;
  tiles_[i]->showPreview(image, step, steps);
}

void ResultGridView::markStopped(const QString& message) {
  if (run_) return;
  for (ImageTile* t : tiles_) t->showPlaceholder(message);
}

void ResultGridView::showRun(const RunPtr& run) {
  if (!run) return clear();
  devices_ = run->devices();
  batch_ = run->batch();
  if (tileCount() != run->imageCount()) rebuild(run->imageCount());
  run_ = run;
  if (sized_ && !run->images.empty()) {
    image_size_ = run->images[0].size();
    sizeTiles(image_size_);
  }
  for (int i = 0; i < tileCount(); ++i) {
    tiles_[i]->setCaption(run->prompt(i), detail(run->seed(), i, devices_, batch_));
    tiles_[i]->showFinal(run->images[i]);
    tiles_[i]->setFlagged(i < static_cast<int>(run->result.nsfw_flagged.size()) && run->result.nsfw_flagged[i]);
  }
}

}  // namespace octodiff::gui

namespace octodiff::gui {

QSize ResultGridView::shownSize(const QSize& image) {
  const int side = std::max(image.width(), image.height());
  if (side <= 0) return {kSmallestShownSide, kSmallestShownSide};
  if (side > kLargestShownSide) return image.scaled(kLargestShownSide, kLargestShownSide, Qt::KeepAspectRatio);
  return image * std::max(1, kSmallestShownSide / side);
}

void ResultGridView::setTilesSizedToImages(bool sized) {
  sized_ = sized;
  auto* column = static_cast<QVBoxLayout*>(layout());
  column->setStretchFactor(tiles_area_, sized ? 0 : 1);
  if (sized) {
    column->addStretch(1);  // the tiles at the top, the room left below them
    grid_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  }
  rebuild(tileCount());
}

void ResultGridView::sizeTiles(const QSize& image) {
  const QSize shown = shownSize(image);
  for (ImageTile* t : tiles_) {
    if (auto* canvas = t->findChild<ImageCanvas*>()) canvas->setFixedSize(shown);
    t->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
    grid_->setAlignment(t, Qt::AlignTop | Qt::AlignLeft);
  }
}

}  // namespace octodiff::gui
