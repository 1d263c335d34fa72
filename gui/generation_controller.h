// GenerationController: owns the loaded model and its ShardedPipeline and runs everything heavy
// off the UI thread.
//
// Model loading and generation jobs run on a private one-thread pool (QtConcurrent::run; a job
// reports each finished run through its QPromise, observed by a QFutureWatcher). The engine's
// progress and preview callbacks arrive on engine worker threads; they are forwarded to this
// object's (the UI) thread as queued calls, so every signal below is emitted on the UI thread.
// Cancel sets the engine's CancelToken, which stops a run within one UNet call. The destructor
// cancels and waits, so the pipeline never outlives a run nor a run the pipeline.
#pragma once

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QObject>
#include <QThreadPool>
#include <memory>
#include <optional>

#include "pipeline/comparison_sheet.h"
#include "pipeline/sharded_pipeline.h"
#include "progress_tracker.h"
#include "run_record.h"

namespace octodiff::gui {

enum class JobOutcome { Completed, Cancelled, Failed };

struct LoadOutcome {
  enum Kind { Model, Loras } kind = Model;
  ModelPtr model;
  QString path, error;
  QString warning;  // the model loaded, but e.g. its TAESD did not
  double seconds = 0;
};

class GenerationController : public QObject {
  Q_OBJECT
 public:
  explicit GenerationController(QObject* parent = nullptr);
  ~GenerationController() override;

  ModelPtr model() const { return model_; }
  // The model's pipeline (its plan cache), null before a model is loaded.
  std::shared_ptr<const ShardedPipeline> pipeline() const { return pipeline_; }
  bool isLoading() const { return load_watcher_.isRunning(); }
  bool isGenerating() const { return job_watcher_.isRunning() || sheet_watcher_.isRunning(); }
  bool isBusy() const { return isLoading() || isGenerating(); }
  bool isRunningSheet() const { return sheet_watcher_.isRunning(); }
  const ProgressTracker& progress() const { return tracker_; }
  double jobSeconds() const { return clock_.isValid() ? clock_.elapsed() / 1000.0 : 0.0; }
  int runsCompleted() const { return runs_completed_; }

  // Starts loading (off the UI thread); false when busy. modelLoaded or modelLoadFailed follows.
  // The VAE's encoder is loaded too, for image to image (SD 1.5: 34 M parameters beside the
  // decoder's 49 M; its packed weights live in the weight cache like the rest).
  // `taesd`: a tiny autoencoder to load beside it (ModelLoadOptions::tiny_autoencoder); when it
  // cannot be loaded the model loads without it and loadWarning() says why.
  // `dtype`: the weights are packed for it (a load-time property, ModelLoadOptions::dtype); a run
  // in another dtype needs the model loaded again.
  bool loadModel(const QString& path, const QString& tokenizerDir = {}, const QString& taesd = {},
                 ComputeDType dtype = ComputeDType::F32);
  // What the last successful load could not do (empty: nothing).
  QString loadWarning() const { return load_warning_; }
  // Replaces the model by its base with `loras` merged (StableDiffusionModel::with_loras: only
  // the layers the LoRAs touch are packed again), off the UI thread; false when busy or no model.
  // lorasApplied or lorasFailed follows; on failure the model stays as it was.
  bool applyLoras(const std::vector<LoraSpec>& loras);
  // Whether the model has exactly these LoRAs (same files, same strengths, same order).
  bool hasLoras(const std::vector<LoraSpec>& loras) const;
  // Starts a job; false (with errorOccurred) when there is no model or a job is running.
  bool start(const Job& job);
  // Starts a comparison sheet (generation_controller_sheet.cpp): its runs one after another on
  // the worker, on this model's pipeline (and plan cache); false (with errorOccurred) when busy.
  // sheetRunFinished follows each run (numbered with the other runs; device d of `run` made cell
  // cells[d]), then sheetFinished or sheetStopped.
  bool startSheet(const SheetPlan& plan);
  void cancel();
  // Blocks until no load, job or encoding ahead is running (used when the window closes, after
  // cancel()).
  void waitForIdle();

  // Encodes a request's prompts into the pipeline's text-encoding cache on the worker, ahead of a
  // run of them (ShardedPipeline::encode_prompts; live mode does it while the user pauses, so the
  // run that follows has no text phase left); false when busy or no model is loaded. One at a time:
  // a request made while one is encoding waits, replacing any other waiting; a job started
  // meanwhile runs after the encoding in flight and drops the waiting one (it encodes what it needs
  // itself). Not part of isBusy(). Failures are left to the run to report.
  bool encodePromptsAhead(const GenerationRequest& request);
  bool isEncodingAhead() const { return ahead_watcher_.isRunning(); }

 signals:
  void modelLoading(const QString& path);
  void modelLoaded(const QString& path, double seconds);
  void modelLoadFailed(const QString& path, const QString& message);
  void lorasApplying();
  void lorasApplied(double seconds);
  void lorasFailed(const QString& message);
  void jobStarted(int runs);
  void runStarted(int index, int runs, int devices, int batch, const QString& signature);
  void progressChanged();  // progress() has news
  void previewReady(int device, int step, const QImage& image);
  void runFinished(const octodiff::gui::RunPtr& run);
  void jobFinished(octodiff::gui::JobOutcome outcome);
  void errorOccurred(const QString& message);
  void busyChanged(bool busy);
  void sheetRunFinished(int index, const std::vector<int>& cells, const octodiff::gui::RunPtr& run);
  void sheetFinished(const std::shared_ptr<const octodiff::SheetResult>& sheet);
  void sheetStopped(octodiff::gui::JobOutcome outcome);  // cancelled or failed (errorOccurred says why)
  // An encoding ahead ended: the seconds its text phase took (negative: it failed).
  void promptsEncodedAhead(double seconds);

 private:
  struct JobState;
  void onRunStarted(int index, int runs, int devices, int batch, int steps, const QString& signature);
  void onEngineEvent(const ProgressEvent& event);
  void onResultReady(int index);
  void onJobFinished();
  void onLoadFinished();
  void adoptModel(const ModelPtr& model);
  struct SheetJob;
  void onSheetFinished();
  void cancelSheet();
  void onAheadFinished();

  QThreadPool pool_;       // loads and jobs, one at a time
  QThreadPool hash_pool_;  // the model hash, beside them
  ModelPtr model_;
  std::shared_ptr<ShardedPipeline> pipeline_;
  std::shared_ptr<JobState> job_;
  QFutureWatcher<RunPtr> job_watcher_;
  QFutureWatcher<LoadOutcome> load_watcher_;
  QFutureWatcher<std::shared_ptr<const SheetResult>> sheet_watcher_;
  std::shared_ptr<SheetJob> sheet_job_;
  QFutureWatcher<double> ahead_watcher_;
  std::optional<GenerationRequest> ahead_waiting_;
  ProgressTracker tracker_;
  QElapsedTimer clock_;
  int runs_completed_ = 0;
  QString load_warning_;
};

}  // namespace octodiff::gui
