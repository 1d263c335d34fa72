#include "timings_panel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QVBoxLayout>

#include "progress_tracker.h"

namespace octodiff::gui {
namespace {

QString swatch(const QColor& c) {
  return QStringLiteral("<span style='color:%1'>■</span>").arg(c.name());
}

}  // namespace

TimingsPanel::TimingsPanel(QWidget* parent) : QWidget(parent) {
  plan_ = new QLabel(tr("No run yet."));
  plan_->setObjectName(QStringLiteral("planLabel"));
  plan_->setWordWrap(true);
  QFont f = plan_->font();
  f.setBold(true);
  plan_->setFont(f);
  breakdown_ = new QLabel;
  breakdown_->setObjectName(QStringLiteral("breakdownLabel"));
  breakdown_->setTextFormat(Qt::RichText);
  breakdown_->setWordWrap(true);
  chart_ = new TimingChart;

  chart_->setMinimumHeight(70);
  auto* summary = new QWidget;
  summary->setFixedWidth(400);
  auto* left = new QVBoxLayout(summary);
  left->setContentsMargins(0, 0, 0, 0);
  left->addWidget(plan_);
  left->addWidget(breakdown_);
  left->addWidget(chart_, 1);

  model_ = new RunHistoryModel(this);
  table_ = new QTableView;
  table_->setObjectName(QStringLiteral("runHistory"));
  table_->setModel(model_);
  table_->setAlternatingRowColors(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setWordWrap(false);
  table_->setColumnHidden(RunHistoryModel::Time, false);
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    if (auto sheet = model_->sheetAt(index.row())) emit sheetReopenRequested(sheet);
  });

  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(6, 6, 6, 6);
  row->addWidget(summary);
  row->addWidget(table_, 1);
}

void TimingsPanel::addRun(const RunRecord& run) {
  model_->addRun(run);
  table_->resizeColumnsToContents();
  table_->scrollToBottom();

  const Timings& t = run.result.timings;
  const Signature& s = run.result.signature;
  if (run.result.compiled) {
    plan_->setText(tr("Run #%1: compiled in %2 (first run of this signature), then ran")
                       .arg(run.number)
                       .arg(formatDuration(t.compile)));
    plan_->setStyleSheet(QStringLiteral("color: #b06000;"));
  } else {
    plan_->setText(tr("Run #%1: cached plan, no compile").arg(run.number));
    plan_->setStyleSheet(QStringLiteral("color: #008040;"));
  }
  const int calls = run.result.model_calls;
  breakdown_->setText(
      tr("<table cellspacing=2>"
         "<tr><td>%1 Compile</td><td align=right>%2</td></tr>"
         "<tr><td>%3 Text encoding</td><td align=right>%4</td></tr>"
         "<tr><td>%5 Denoising</td><td align=right>%6</td><td>&nbsp;%7 steps × %8, %9 per step</td></tr>"
         "<tr><td>%10 Decoding</td><td align=right>%11</td></tr>"
         "<tr><td><b>Inference</b></td><td align=right><b>%12</b></td><td>&nbsp;(total with compile "
         "%13)</td></tr>"
         "</table>")
          .arg(swatch(TimingChart::compileColor()),
               run.result.compiled ? formatDuration(t.compile) : tr("cached"))
          .arg(swatch(TimingChart::textColor()), formatDuration(t.text_encode))
          .arg(swatch(TimingChart::denoiseColor()), formatDuration(t.denoise))
          .arg(calls)
          .arg(s.devices == 1 ? tr("1 device") : tr("%1 devices").arg(s.devices))
          .arg(formatDuration(t.mean_step))
          .arg(swatch(TimingChart::decodeColor()), formatDuration(t.decode))
          .arg(formatDuration(t.total - t.compile), formatDuration(t.total)));
  chart_->setTimings(t, run.result.compiled);
}

}  // namespace octodiff::gui
