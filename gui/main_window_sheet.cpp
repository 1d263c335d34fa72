// MainWindow and the comparison sheet tab: the form's first prompt and settings expanded by the
// sheet's axes (pipeline/comparison_sheet.h), run on the controller's worker.
#include <QStatusBar>

#include "main_window.h"

namespace octodiff::gui {

void MainWindow::connectSheet() {
  connect(sheet_, &ComparisonSheetView::runRequested, this, &MainWindow::runSheet);
  connect(sheet_, &ComparisonSheetView::errorOccurred, this, &MainWindow::reportError);
  connect(controller_, &GenerationController::sheetRunFinished, sheet_,
          [this](int, const std::vector<int>& cells, const RunPtr& run) {
            sheet_->showRun(cells, run);
            timings_->addRun(*run);  // the sheet's runs join the run history
          });
  connect(controller_, &GenerationController::sheetFinished, this,
          [this](const std::shared_ptr<const SheetResult>& result) {
            sheet_->showResult(result);
            timings_->history()->attachSheet(sheet_->runNumbers(), result);  // now it can be reopened
            refreshProgress();
            progress_->finish(tr("Sheet done in %1 s").arg(controller_->jobSeconds(), 0, 'f', 1));
            statusBar()->showMessage(tr("Comparison sheet: %1 cells").arg(result->plan.cells.size()));
          });
  connect(timings_, &TimingsPanel::sheetReopenRequested, this, [this](const std::shared_ptr<const SheetResult>& s) {
    if (controller_->isRunningSheet()) {
      reportError(tr("A comparison sheet is running: wait for it (or cancel it) to show an earlier one."));
      return;
    }
    sheet_->showSheet(s);
    tabs_->setCurrentWidget(sheet_);
    statusBar()->showMessage(tr("Comparison sheet of %1 cells shown again").arg(s->plan.cells.size()), 8000);
  });
  connect(sheet_, &ComparisonSheetView::cellEnlargeRequested, this, [this](const RunPtr& run, const QString& title) {
    if (ImageDialog* dialog = enlarge(run, 0)) dialog->setWindowTitle(title);
  });
  connect(controller_, &GenerationController::sheetStopped, this, [this](JobOutcome outcome) {
    const QString what = outcome == JobOutcome::Cancelled ? tr("cancelled") : tr("failed");
    sheet_->markStopped(what);
    progress_->finish(what);
  });
}

bool MainWindow::runSheet(const SheetSpec& spec) {
  if (controller_->isBusy()) return false;
  QString error;
  std::vector<LoraSpec> loras;
  auto request = runRequestFromForm(&loras, &error);
  if (!request) {
    reportError(error);
    return false;
  }
  if (reloadModelForDtypeThen(request->dtype, [this, spec] { runSheet(spec); })) return true;
  if (!controller_->hasLoras(loras)) return applyLorasThen(loras, [this, spec] { runSheet(spec); });
  if (!ControlNetPanel::modelsLoaded(*request))
    return loadControlNetsThen(request->dtype, [this, spec] { runSheet(spec); });
  // One image per cell: the first prompt, one device, batch 1.
  request->prompts = {request->prompts.front()};
  if (request->negative_prompts.size() > 1) request->negative_prompts.resize(1);
  request->devices = 0;
  request->batch_per_device = 1;
  try {
    const SheetPlan plan = plan_sheet(spec, *request, static_cast<int>(controller_->model()->loras().size()));
    banner_->dismiss();
    saveSettings();
    tabs_->setCurrentWidget(sheet_);
    sheet_->beginSheet(plan);
    progress_->begin(1);
    if (!controller_->startSheet(plan)) return false;
  } catch (const std::exception& e) {
    reportError(tr("Comparison sheet: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
  statusBar()->showMessage(tr("Running the comparison sheet…"));
  return true;
}

}  // namespace octodiff::gui
