#include "seed_comparison_view.h"

#include <QLabel>
#include <QRegularExpression>
#include <QVBoxLayout>

namespace octodiff::gui {
namespace {

constexpr int kMaxSeeds = 32;

}  // namespace

SeedComparisonView::SeedComparisonView(QWidget* parent) : QWidget(parent) {
  mode_ = new QComboBox;
  mode_->setObjectName(QStringLiteral("comparisonMode"));
  mode_->addItem(tr("Same prompts, one grid per seed"), static_cast<int>(JobKind::SeedComparison));
  mode_->addItem(tr("Seed sweep: first prompt, a row of seeds"), static_cast<int>(JobKind::SeedSweep));
  seeds_ = new QLineEdit(QStringLiteral("0, 1, 2, 3"));
  seeds_->setObjectName(QStringLiteral("comparisonSeeds"));
  seeds_->setPlaceholderText(tr("seeds, e.g. 0, 1, 42 or 10-17"));
  seeds_->setToolTip(tr("Two or more seeds: a list (0, 1, 42) and/or ranges (10-17)"));
  run_ = new QPushButton(tr("Run comparison"));
  run_->setObjectName(QStringLiteral("runComparison"));
  connect(run_, &QPushButton::clicked, this, &SeedComparisonView::requestRun);
  connect(seeds_, &QLineEdit::returnPressed, this, &SeedComparisonView::requestRun);

  auto* controls = new QHBoxLayout;
  controls->addWidget(mode_);
  controls->addWidget(new QLabel(tr("Seeds")));
  controls->addWidget(seeds_, 1);
  controls->addWidget(run_);

  strip_ = new QWidget;
  strip_layout_ = new QHBoxLayout(strip_);
  strip_layout_->setContentsMargins(4, 4, 4, 4);
  strip_layout_->setSpacing(14);
  auto* hint =
      new QLabel(tr("Compare seeds: the prompts of the form run once per seed, and the grids appear "
                    "here side by side. A seed sweep runs the first prompt alone, one image per seed."));
  hint->setWordWrap(true);
  hint->setAlignment(Qt::AlignCenter);
  hint->setStyleSheet(QStringLiteral("color: palette(mid); font-size: 12pt;"));
  strip_layout_->addWidget(hint);
  scroll_ = new QScrollArea;
  scroll_->setWidget(strip_);
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);

  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->addLayout(controls);
  column->addWidget(scroll_, 1);
}

std::optional<std::vector<int64_t>> SeedComparisonView::parseSeeds(const QString& text, QString* error) {
  std::vector<int64_t> seeds;
  static const QRegularExpression range(QStringLiteral("^(\\d{1,10})-(\\d{1,10})$"));
  static const QRegularExpression single(QStringLiteral("^\\d{1,10}$"));
  QString normal = text;
  normal.replace(QRegularExpression(QStringLiteral("\\s*-\\s*")), QStringLiteral("-"));
  for (QString part : normal.split(QRegularExpression(QStringLiteral("[,;\\s]+")), Qt::SkipEmptyParts)) {
    part = part.trimmed();
    if (part.isEmpty()) continue;
    if (auto m = range.match(part); m.hasMatch()) {
      const int64_t a = m.captured(1).toLongLong(), b = m.captured(2).toLongLong();
      if (b < a || b - a >= kMaxSeeds) {
        if (error) *error = tr("the seed range '%1' is reversed or longer than %2").arg(part).arg(kMaxSeeds);
        return std::nullopt;
      }
      for (int64_t s = a; s <= b; ++s) seeds.push_back(s);
    } else if (single.match(part).hasMatch()) {
      seeds.push_back(part.toLongLong());
    } else {
      if (error)
        *error = tr("'%1' is not a seed (use whole numbers like 0, 1, 42 or a range 10-17)").arg(part);
      return std::nullopt;
    }
  }
  if (seeds.size() < 2) {
    if (error) *error = tr("give at least two seeds to compare, e.g. 0, 1, 2, 3");
    return std::nullopt;
  }
  if (seeds.size() > kMaxSeeds) {
    if (error) *error = tr("%1 seeds given; at most %2 per comparison").arg(seeds.size()).arg(kMaxSeeds);
    return std::nullopt;
  }
  for (int64_t s : seeds)
    if (s > 0xffffffffLL) {
      if (error) *error = tr("seed %1 is larger than 4294967295 (JAX keeps 32 bits)").arg(s);
      return std::nullopt;
    }
  return seeds;
}

JobKind SeedComparisonView::mode() const {
  return static_cast<JobKind>(mode_->currentData().toInt());
}

void SeedComparisonView::setMode(JobKind kind) {
  const int i = mode_->findData(static_cast<int>(kind));
  if (i >= 0) mode_->setCurrentIndex(i);
}

void SeedComparisonView::requestRun() {
  QString error;
  const auto seeds = parseSeeds(seeds_->text(), &error);
  if (!seeds) {
    emit errorOccurred(tr("Seed comparison: %1").arg(error));
    return;
  }
  emit runRequested(mode(), *seeds);
}

void SeedComparisonView::beginJob(JobKind kind, const std::vector<int64_t>& seeds) {
  while (QLayoutItem* item = strip_layout_->takeAt(0)) {
    if (item->widget()) item->widget()->deleteLater();
    delete item;
  }
  columns_.clear();
  seeds_list_ = seeds;
  job_kind_ = kind;
  active_ = -1;
  for (size_t k = 0; k < seeds.size(); ++k) {
    auto* view = new ResultGridView;
    view->setObjectName(QStringLiteral("seedColumn%1").arg(k));
    view->setTitle(tr("Seed %1").arg(seeds[k]));
    view->setTilesSizedToImages(true);
    view->clear(tr("queued"));
    connect(view, &ResultGridView::enlargeRequested, this, &SeedComparisonView::enlargeRequested);
    connect(view, &ResultGridView::saveRequested, this, &SeedComparisonView::saveRequested);
    connect(view, &ResultGridView::copyRequested, this, &SeedComparisonView::copyRequested);
    connect(view, &ResultGridView::reuseRequested, this, &SeedComparisonView::reuseRequested);
    connect(view, &ResultGridView::varyRequested, this, &SeedComparisonView::varyRequested);
    auto* save = new QPushButton(kind == JobKind::SeedSweep ? tr("Save image…") : tr("Save grid…"));
    save->setEnabled(false);
    save->setObjectName(QStringLiteral("saveColumn"));
    connect(save, &QPushButton::clicked, this, [this, view] {
      if (view->run()) emit saveGridRequested(view->run());
    });
    auto* holder = new QWidget;
    auto* v = new QVBoxLayout(holder);
    v->setContentsMargins(0, 0, 0, 0);
    v->addWidget(view);
    v->addWidget(save, 0, Qt::AlignHCenter);
    v->addStretch(1);
    strip_layout_->addWidget(holder);
    columns_.push_back(view);
  }
  strip_layout_->addStretch(1);
}

void SeedComparisonView::beginRun(int index, const QStringList& prompts, int devices, int batch) {
  if (index < 0 || index >= columnCount()) return;
  active_ = index;
  columns_[index]->beginRun(prompts, devices, batch, seeds_list_.at(index));
}

void SeedComparisonView::showPreview(int device, int step, int steps, const QImage& image) {
  if (active_ >= 0 && active_ < columnCount()) columns_[active_]->showPreview(device, step, steps, image);
}

void SeedComparisonView::addRun(const RunPtr& run) {
  const int i = run->index_in_job;
  if (i < 0 || i >= columnCount()) return;
  columns_[i]->showRun(run);
  if (auto* save = columns_[i]->parentWidget()->findChild<QPushButton*>(QStringLiteral("saveColumn")))
    save->setEnabled(true);
}

void SeedComparisonView::markStopped(const QString& message) {
  for (ResultGridView* v : columns_)
    if (!v->run()) {
      if (v->tileCount() > 0)
        v->markStopped(message);
      else
        v->clear(message);
    }
}

}  // namespace octodiff::gui
