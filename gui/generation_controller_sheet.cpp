// GenerationController::startSheet: a comparison sheet's runs on the controller's worker and
// pipeline (pipeline/comparison_sheet.h), with progress through the same tracker as other jobs.
#include <QtConcurrent/QtConcurrent>

#include "core/error.h"
#include "failure_message.h"
#include "generation_controller.h"
#include "sheet_runs.h"

namespace octodiff::gui {
namespace {

template <typename F>
void postToObject(QObject* context, F&& f) {
  QMetaObject::invokeMethod(context, std::forward<F>(f), Qt::QueuedConnection);
}

// The controller's wording (failure_message.h), naming the sheet.
FailureContext sheetFailure() {
  FailureContext c;
  c.prefix = QStringLiteral("Comparison sheet: ");
  c.memoryAdvice = QStringLiteral("Try a smaller sheet or image size.");
  c.task = QStringLiteral("the comparison sheet");
  return c;
}

}  // namespace

struct GenerationController::SheetJob {
  CancelToken cancel;
  bool cancelled = false;  // written by the worker, read after it finished
  QString error;
};

bool GenerationController::startSheet(const SheetPlan& plan) {
  if (isBusy()) {
    emit errorOccurred(QStringLiteral("Wait for the current run (or model load) to finish, or cancel it."));
    return false;
  }
  if (!pipeline_) {
    emit errorOccurred(QStringLiteral("No model is loaded. Choose a model folder or file and press Load."));
    return false;
  }
  auto job = std::make_shared<SheetJob>();
  sheet_job_ = job;
  tracker_.startJob(static_cast<int>(plan.runs.size()), 0.0);
  clock_.start();
  auto pipe = pipeline_;
  sheet_watcher_.setFuture(QtConcurrent::run(&pool_, [this, pipe, plan, job]() -> std::shared_ptr<const SheetResult> {
    SheetCallbacks callbacks;
    callbacks.run_started = [this](int k, int, const SheetRun& run) {
      const int devices = static_cast<int>(run.cells.size()), steps = run.request.steps;
      postToObject(this, [this, k, devices, steps] {
        tracker_.startRun(k, devices, steps);
        emit progressChanged();
      });
    };
    callbacks.progress = [this](const ProgressEvent& e) { postToObject(this, [this, e] { onEngineEvent(e); }); };
    callbacks.run_finished = [this, &plan](int k, const SheetRunResult& r) {
      std::shared_ptr<RunRecord> record = sheetRunRecord(plan, k, r);
      const std::vector<int> cells = plan.runs[k].cells;
      postToObject(this, [this, k, cells, record] {
        record->number = ++runs_completed_;  // numbered with the other runs, for the run history
        tracker_.finishRun();
        emit progressChanged();
        emit sheetRunFinished(k, cells, RunPtr(record));
      });
    };
    try {
      SheetRunner runner(pipe);
      return std::make_shared<const SheetResult>(runner.run(plan, callbacks, &job->cancel));
    } catch (const Cancelled&) {
      job->cancelled = true;
    } catch (...) {
      job->error = describeFailure(std::current_exception(), sheetFailure());
    }
    return nullptr;
  }));
  emit busyChanged(true);
  return true;
}

void GenerationController::cancelSheet() {
  if (sheet_job_) sheet_job_->cancel.cancel();
}

void GenerationController::onSheetFinished() {
  const auto job = sheet_job_;
  const auto sheet = sheet_watcher_.result();
  if (sheet) {
    emit sheetFinished(sheet);
  } else if (job && job->cancelled) {
    emit sheetStopped(JobOutcome::Cancelled);
  } else {
    if (job) emit errorOccurred(job->error);
    emit sheetStopped(JobOutcome::Failed);
  }
  emit busyChanged(isBusy());
}

}  // namespace octodiff::gui
