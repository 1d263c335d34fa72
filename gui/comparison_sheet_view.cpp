#include "comparison_sheet_view.h"

#include <QFileDialog>
#include <QMouseEvent>
#include <QHBoxLayout>
#include <QPixmap>
#include <QSettings>
#include <QVBoxLayout>
#include <algorithm>

#include "io/png.h"
#include "sheet_render.h"
#include "sheet_runs.h"

namespace octodiff::gui {
namespace {

constexpr int kSmallestShownSide = 128;  // smaller images are enlarged by a whole factor to this
const char* kAxisTitles[] = {"X", "Y", "Z"};

QString defaultValues(const QString& name) {
  if (name == "seed") return QStringLiteral("1, 2, 3");
  if (name == "guidance") return QStringLiteral("3, 7.5, 12");
  if (name == "steps") return QStringLiteral("10, 20, 30");
  if (name == "scheduler") return QStringLiteral("pndm, ddim, euler-a");
  if (name == "strength") return QStringLiteral("0.3, 0.6, 0.9");
  if (name == "lora") return QStringLiteral("0, 0.5, 1");
  if (name == "clip-skip") return QStringLiteral("1, 2");
  if (name == "guidance-rescale") return QStringLiteral("0, 0.35, 0.7");
  return QStringLiteral("red, blue, green");
}

int enlargement(const QImage& image) {
  const int side = std::max(image.width(), image.height());
  return side > 0 ? std::max(1, kSmallestShownSide / side) : 1;
}

}  // namespace

ComparisonSheetView::ComparisonSheetView(QWidget* parent) : QWidget(parent) {
  auto* controls = new QHBoxLayout;
  for (int a = 0; a < 3; ++a) {
    names_[a] = new QComboBox;
    names_[a]->setObjectName(QStringLiteral("sheetAxisName%1").arg(kAxisTitles[a]));
    if (a > 0) names_[a]->addItem(tr("(none)"), QString());
    for (const std::string& n : sheet_axis_names()) names_[a]->addItem(QString::fromStdString(n), QString::fromStdString(n));
    values_[a] = new QLineEdit;
    values_[a]->setObjectName(QStringLiteral("sheetAxisValues%1").arg(kAxisTitles[a]));
    values_[a]->setPlaceholderText(tr("values, e.g. 3, 7.5"));
    values_[a]->setToolTip(tr("Comma-separated values; seeds also as ranges (10-13); prompt: the first value is "
                              "searched for in the prompt, the others replace it; quote a value with a comma"));
    connect(names_[a], &QComboBox::currentIndexChanged, this, [this, a] {
      const QString name = names_[a]->currentData().toString();
      values_[a]->setEnabled(!name.isEmpty());
      if (!name.isEmpty()) values_[a]->setText(defaultValues(name));
    });
    connect(values_[a], &QLineEdit::returnPressed, this, &ComparisonSheetView::requestRun);
    controls->addWidget(new QLabel(QString::fromLatin1(kAxisTitles[a])));
    controls->addWidget(names_[a]);
    controls->addWidget(values_[a], 1);
  }
  // The last sheet's axes (QSettings "ui/sheet_axis_x|y|z"), else guidance × seed.
  const QSettings settings;
  setAxisText(0, settings.value("ui/sheet_axis_x", QStringLiteral("guidance=3, 7.5, 12")).toString());
  setAxisText(1, settings.value("ui/sheet_axis_y", QStringLiteral("seed=1, 2, 3")).toString());
  setAxisText(2, settings.value("ui/sheet_axis_z", QString()).toString());
  run_ = new QPushButton(tr("Run sheet"));
  run_->setObjectName(QStringLiteral("runSheet"));
  connect(run_, &QPushButton::clicked, this, &ComparisonSheetView::requestRun);
  save_sheet_ = new QPushButton(tr("Save sheet…"));
  save_sheet_->setObjectName(QStringLiteral("saveSheet"));
  save_cells_ = new QPushButton(tr("Save cells…"));
  save_cells_->setObjectName(QStringLiteral("saveSheetCells"));
  save_sheet_->setEnabled(false);
  save_cells_->setEnabled(false);
  connect(save_sheet_, &QPushButton::clicked, this, &ComparisonSheetView::saveSheetDialog);
  connect(save_cells_, &QPushButton::clicked, this, &ComparisonSheetView::saveCellsDialog);
  auto* actions = new QHBoxLayout;
  status_ = new QLabel(tr("One prompt (the first), one image per cell; each cell is the single run with its "
                          "settings. Cells that differ only in seed or prompt run as devices of one run."));
  status_->setObjectName(QStringLiteral("sheetStatus"));
  status_->setWordWrap(true);
  actions->addWidget(status_, 1);
  actions->addWidget(run_);
  actions->addWidget(save_sheet_);
  actions->addWidget(save_cells_);

  pages_ = new QWidget;
  new QHBoxLayout(pages_);
  scroll_ = new QScrollArea;
  scroll_->setWidget(pages_);
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->addLayout(controls);
  column->addLayout(actions);
  column->addWidget(scroll_, 1);
}

QString ComparisonSheetView::axisText(int axis) const {
  const QString name = names_[axis]->currentData().toString();
  return name.isEmpty() ? QString() : name + QLatin1Char('=') + values_[axis]->text();
}

void ComparisonSheetView::setAxisText(int axis, const QString& text) {
  const int eq = text.indexOf(QLatin1Char('='));
  const int i = names_[axis]->findData(eq < 0 ? QString() : text.left(eq).trimmed());
  names_[axis]->setCurrentIndex(std::max(i, 0));
  values_[axis]->setText(eq < 0 ? QString() : text.mid(eq + 1));
  values_[axis]->setEnabled(!names_[axis]->currentData().toString().isEmpty());
}

std::optional<SheetSpec> ComparisonSheetView::spec(QString* error) const {
  try {
    return parse_sheet_spec(axisText(0).toStdString(), axisText(1).toStdString(), axisText(2).toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
}

void ComparisonSheetView::requestRun() {
  QString error;
  const auto s = spec(&error);
  if (!s) {
    emit errorOccurred(tr("Comparison sheet: %1").arg(error));
    return;
  }
  QSettings settings;
  const char* keys[] = {"ui/sheet_axis_x", "ui/sheet_axis_y", "ui/sheet_axis_z"};
  for (int a = 0; a < 3; ++a) settings.setValue(keys[a], axisText(a));
  emit runRequested(*s);
}

void ComparisonSheetView::clearGrid() {
  QLayout* layout = pages_->layout();
  while (QLayoutItem* item = layout->takeAt(0)) {
    if (item->widget()) item->widget()->deleteLater();
    delete item;
  }
  cells_.clear();
  cell_runs_.clear();
  runs_.clear();
  column_labels_.clear();
  row_labels_.clear();
  page_labels_.clear();
}

QLabel* ComparisonSheetView::addLabel(QGridLayout* grid, const QString& text, const QString& objectName, int row,
                                      int column) {
  auto* label = new QLabel(text);
  label->setObjectName(objectName);
  label->setWordWrap(true);
  label->setAlignment(objectName == "sheetRowLabel" ? (Qt::AlignRight | Qt::AlignVCenter) : Qt::AlignCenter);
  grid->addWidget(label, row, column);
  return label;
}

void ComparisonSheetView::beginSheet(const SheetPlan& plan) {
  clearGrid();
  plan_ = plan;
  result_.reset();
  save_sheet_->setEnabled(false);
  save_cells_->setEnabled(false);
  const SheetSpec& s = plan.spec;
  auto label_of = [&](int axis, int i) {
    return axis < static_cast<int>(s.axes.size()) ? QString::fromStdString(s.axes[axis].label(i)) : QString();
  };
  cells_.assign(plan.cells.size(), nullptr);
  cell_runs_.assign(plan.cells.size(), nullptr);
  for (int z = 0; z < s.size(2); ++z) {
    auto* page = new QWidget;
    auto* v = new QVBoxLayout(page);
    v->setContentsMargins(0, 0, 0, 0);
    if (s.axes.size() > 2) {
      page_labels_.push_back(new QLabel(label_of(2, z)));
      page_labels_.back()->setObjectName(QStringLiteral("sheetPageLabel"));
      page_labels_.back()->setStyleSheet(QStringLiteral("font-weight: bold"));
      v->addWidget(page_labels_.back(), 0, Qt::AlignHCenter);
    }
    auto* grid = new QGridLayout;
    grid->setSpacing(4);
    for (int x = 0; x < s.size(0); ++x) {
      QLabel* l = addLabel(grid, label_of(0, x), QStringLiteral("sheetColumnLabel"), 0, x + 1);
      if (z == 0) column_labels_.push_back(l);
    }
    for (int y = 0; y < s.size(1); ++y) {
      if (s.axes.size() > 1 && z == 0) row_labels_.push_back(addLabel(grid, label_of(1, y), "sheetRowLabel", y + 1, 0));
      for (int x = 0; x < s.size(0); ++x) {
        auto* cell = new QLabel(tr("queued"));
        cell->setObjectName(QStringLiteral("sheetCell"));
        cell->setAlignment(Qt::AlignCenter);
        cell->setMinimumSize(64, 64);
        cell->setStyleSheet(QStringLiteral("color: palette(mid); border: 1px solid palette(midlight);"));
        cell->installEventFilter(this);  // a click enlarges it
        grid->addWidget(cell, y + 1, x + 1);
        cells_[plan.cell_index(x, y, z)] = cell;
      }
    }
    v->addLayout(grid);
    v->addStretch(1);
    pages_->layout()->addWidget(page);
  }
  static_cast<QHBoxLayout*>(pages_->layout())->addStretch(1);
  status_->setText(tr("%1 cells in %2 runs").arg(plan.cells.size()).arg(plan.runs.size()));
}

void ComparisonSheetView::showCells(const std::vector<int>& cells, const std::vector<QImage>& images) {
  for (size_t i = 0; i < cells.size() && i < images.size(); ++i) {
    if (cells[i] < 0 || cells[i] >= cellCount()) continue;
    QLabel* cell = cells_[cells[i]];
    const int f = enlargement(images[i]);
    const QPixmap pixmap = QPixmap::fromImage(
        images[i].scaled(images[i].width() * f, images[i].height() * f, Qt::IgnoreAspectRatio, Qt::FastTransformation));
    cell->setStyleSheet(QString());
    cell->setPixmap(pixmap);
    cell->setFixedSize(pixmap.size());  // the cell is as large as its image, no taller
    if (plan_) {
      const SheetCell& c = plan_->cells[cells[i]];
      cell->setToolTip(tr("seed %1 · guidance %2 · %3 steps\n%4\nClick to enlarge")
                           .arg(c.request.seed)
                           .arg(c.request.guidance_scale)
                           .arg(c.request.steps)
                           .arg(QString::fromStdString(c.request.prompts[0])));
    }
  }
}

void ComparisonSheetView::showResult(const std::shared_ptr<const SheetResult>& result) {
  result_ = result;
  save_sheet_->setEnabled(result_ != nullptr);
  save_cells_->setEnabled(result_ != nullptr);
  if (result_) status_->setText(tr("%1 cells in %2 runs: done").arg(result_->plan.cells.size()).arg(result_->runs.size()));
}

void ComparisonSheetView::markStopped(const QString& message) {
  for (QLabel* c : cells_)
    if (c && c->pixmap().isNull()) c->setText(message);
  status_->setText(message);
}

QImage ComparisonSheetView::labelledSheet() const {
  if (!result_) return {};
  const SheetSpec& s = result_->plan.spec;
  LabelledSheet sheet{s.size(0), s.size(1), s.size(2), sheet_cell_images(*result_), {}, {}, {}};
  std::vector<std::string>* labels[] = {&sheet.column_labels, &sheet.row_labels, &sheet.page_labels};
  for (size_t a = 0; a < s.axes.size(); ++a)
    for (int i = 0; i < s.axes[a].size(); ++i) labels[a]->push_back(s.axes[a].label(i));
  const int side = std::max(sheet.cells[0].width, sheet.cells[0].height);
  return toQImage(render_labelled_sheet(sheet, std::max(1, kSmallestShownSide / side)));
}

bool ComparisonSheetView::exportSheet(const QString& path, QString* error) const {
  try {
    if (!result_) throw std::runtime_error("no finished sheet to save yet");
    write_png(path.toStdString(), toImage8(labelledSheet()), sheet_png_texts(*result_));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool ComparisonSheetView::exportCells(const QString& folder, QString* error) const {
  try {
    if (!result_) throw std::runtime_error("no finished sheet to save yet");
    save_sheet_cell_pngs(folder.toStdString(), *result_);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void ComparisonSheetView::saveSheetDialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save the labelled sheet"), QStringLiteral("sheet.png"),
                                                    tr("PNG images (*.png)"));
  QString error;
  if (!path.isEmpty() && !exportSheet(path, &error)) emit errorOccurred(tr("Could not save the sheet: %1").arg(error));
}

void ComparisonSheetView::saveCellsDialog() {
  const QString folder = QFileDialog::getExistingDirectory(this, tr("Folder for the cells"));
  QString error;
  if (!folder.isEmpty() && !exportCells(folder, &error))
    emit errorOccurred(tr("Could not save the cells: %1").arg(error));
}

QStringList ComparisonSheetView::columnLabels() const {
  QStringList out;
  for (QLabel* l : column_labels_) out << l->text();
  return out;
}

QStringList ComparisonSheetView::rowLabels() const {
  QStringList out;
  for (QLabel* l : row_labels_) out << l->text();
  return out;
}

QStringList ComparisonSheetView::pageLabels() const {
  QStringList out;
  for (QLabel* l : page_labels_) out << l->text();
  return out;
}

}  // namespace octodiff::gui

namespace octodiff::gui {

void ComparisonSheetView::showRun(const std::vector<int>& cells, const RunPtr& run) {
  if (!run || !plan_) return;
  runs_.push_back(run);
  for (size_t d = 0; d < cells.size() && d < run->images.size(); ++d) {
    if (cells[d] < 0 || cells[d] >= cellCount()) continue;
    cell_runs_[cells[d]] = sheetCellRun(*plan_, cells[d], *run, static_cast<int>(d));
    cells_[cells[d]]->setCursor(Qt::PointingHandCursor);
  }
  showCells(cells, run->images);
}

void ComparisonSheetView::showSheet(const std::shared_ptr<const SheetResult>& sheet) {
  if (!sheet) return;
  beginSheet(sheet->plan);
  for (size_t k = 0; k < sheet->runs.size(); ++k)
    showRun(sheet->plan.runs[k].cells, sheetRunRecord(sheet->plan, static_cast<int>(k), sheet->runs[k]));
  showResult(sheet);
}

std::vector<int> ComparisonSheetView::runNumbers() const {
  std::vector<int> numbers;
  for (const RunPtr& r : runs_) numbers.push_back(r->number);
  return numbers;
}

RunPtr ComparisonSheetView::cellRun(int cell) const {
  return cell >= 0 && cell < static_cast<int>(cell_runs_.size()) ? cell_runs_[cell] : nullptr;
}

QString ComparisonSheetView::cellLabel(int cell) const {
  if (!plan_ || cell < 0 || cell >= static_cast<int>(plan_->cells.size())) return {};
  const SheetCell& c = plan_->cells[cell];
  const int at[] = {c.x, c.y, c.z};
  QStringList parts;
  for (size_t a = 0; a < plan_->spec.axes.size(); ++a) parts << QString::fromStdString(plan_->spec.axes[a].label(at[a]));
  return parts.join(QStringLiteral(" · "));
}

void ComparisonSheetView::enlargeCell(int cell) {
  if (const RunPtr run = cellRun(cell))
    emit cellEnlargeRequested(run, tr("Comparison sheet cell %1 of %2 — %3").arg(cell + 1).arg(cellCount()).arg(cellLabel(cell)));
}

bool ComparisonSheetView::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::MouseButtonRelease && static_cast<QMouseEvent*>(event)->button() == Qt::LeftButton) {
    const auto it = std::find(cells_.begin(), cells_.end(), watched);
    if (it != cells_.end()) {
      enlargeCell(static_cast<int>(it - cells_.begin()));
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace octodiff::gui
