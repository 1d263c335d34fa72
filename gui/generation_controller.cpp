#include "generation_controller.h"

#include <QtConcurrent/QtConcurrent>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "failure_message.h"
#include "pipeline/autoencoder_tiny_loader.h"
#include "pipeline/export.h"

namespace octodiff::gui {
namespace {

using Clock = std::chrono::steady_clock;
// Previews are for the eye: a few frames a second per device is plenty, and keeps the UI
// thread's queue short when a tiny model makes hundreds of steps a second.
constexpr auto kPreviewInterval = std::chrono::milliseconds(80);

template <typename F>
void postTo(QObject* context, F&& f) {
  QMetaObject::invokeMethod(context, std::forward<F>(f), Qt::QueuedConnection);
}

}  // namespace

struct GenerationController::JobState {
  CancelToken cancel;
  bool cancelled = false;  // written by the worker, read after it finished
  QString error;
  int first_number = 1;
  JobKind kind = JobKind::Generate;
};

GenerationController::GenerationController(QObject* parent) : QObject(parent) {
  // One job at a time: the engine itself spreads a run over every core.
  pool_.setMaxThreadCount(1);
  hash_pool_.setMaxThreadCount(1);
  connect(&job_watcher_, &QFutureWatcher<RunPtr>::resultReadyAt, this, &GenerationController::onResultReady);
  connect(&job_watcher_, &QFutureWatcher<RunPtr>::finished, this, &GenerationController::onJobFinished);
  connect(&load_watcher_, &QFutureWatcher<LoadOutcome>::finished, this,
          &GenerationController::onLoadFinished);
  connect(&sheet_watcher_, &QFutureWatcher<std::shared_ptr<const SheetResult>>::finished, this,
          &GenerationController::onSheetFinished);
  connect(&ahead_watcher_, &QFutureWatcher<double>::finished, this, &GenerationController::onAheadFinished);
}

GenerationController::~GenerationController() {
  cancel();
  waitForIdle();
  hash_pool_.waitForDone();
}

bool GenerationController::loadModel(const QString& path, const QString& tokenizerDir, const QString& taesd,
                                     ComputeDType dtype) {
  if (isBusy()) return false;
  const std::string p = path.toStdString(), tok = tokenizerDir.trimmed().toStdString(),
                    tiny = taesd.trimmed().toStdString();
  load_watcher_.setFuture(QtConcurrent::run(&pool_, [p, tok, tiny, path, dtype] {
    LoadOutcome out;
    out.path = path;
    const auto t0 = Clock::now();
    try {
      if (p.empty()) fail("no model chosen: pick a diffusers folder or a .safetensors file");
      ModelLoadOptions options;
      options.load_vae_encoder = true;  // image to image (Vary, init images) encodes with it
      options.dtype = dtype;
      if (!tok.empty()) options.tokenizer_dir = tok;
      if (!tiny.empty()) {
        // A bad TAESD must not cost the model: try it alone first (it is small).
        try {
          static_cast<void>(load_autoencoder_tiny(tiny, options.dtype));
          options.tiny_autoencoder = tiny;
        } catch (...) {
          out.warning = QStringLiteral("The TAESD was not loaded (the model was, without it):\n") +
                        describeFailure(std::current_exception());
        }
      }
      out.model = StableDiffusionModel::load(p, options);
    } catch (...) {
      out.error = describeFailure(std::current_exception());
    }
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
  }));
  emit modelLoading(path);
  emit busyChanged(true);
  return true;
}

bool GenerationController::applyLoras(const std::vector<LoraSpec>& loras) {
  if (isBusy() || !model_) return false;
  load_watcher_.setFuture(QtConcurrent::run(&pool_, [base = model_, loras] {
    LoadOutcome out;
    out.kind = LoadOutcome::Loras;
    out.path = QString::fromStdString(base->path().string());
    const auto t0 = Clock::now();
    try {
      out.model = StableDiffusionModel::with_loras(base, loras);
    } catch (...) {
      out.error = describeFailure(std::current_exception());
    }
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
  }));
  emit lorasApplying();
  emit busyChanged(true);
  return true;
}

bool GenerationController::hasLoras(const std::vector<LoraSpec>& loras) const {
  if (!model_) return loras.empty();
  const auto& applied = model_->loras();
  if (applied.size() != loras.size()) return false;
  for (size_t i = 0; i < loras.size(); ++i)
    if (applied[i].spec.path.lexically_normal() != loras[i].path.lexically_normal() ||
        applied[i].spec.strength != loras[i].strength)
      return false;
  return true;
}

void GenerationController::adoptModel(const ModelPtr& model) {
  model_ = model;
  pipeline_ = std::make_shared<ShardedPipeline>(model_);
  // Where the weights stay resident, the first run finds them in memory: they are read from the
  // disk now, while the user writes a prompt (threads of the weight caches; returns at once).
  model_->warm_up();
  // The model hash (PNG metadata) reads every weight byte once; do it now, in the background.
  static_cast<void>(QtConcurrent::run(&hash_pool_, [m = model_] {
    try {
      m->model_hash();
    } catch (...) {
    }
  }));
}

void GenerationController::onLoadFinished() {
  const LoadOutcome out = load_watcher_.result();
  if (out.kind == LoadOutcome::Loras) {
    if (out.model) {
      adoptModel(out.model);
      emit lorasApplied(out.seconds);
    } else {
      emit lorasFailed(out.error);
    }
  } else if (out.model) {
    load_warning_ = out.warning;
    adoptModel(out.model);
    emit modelLoaded(out.path, out.seconds);
  } else {
    emit modelLoadFailed(out.path, out.error);
  }
  emit busyChanged(isBusy());
}

bool GenerationController::start(const Job& job) {
  if (isBusy()) {
    emit errorOccurred(QStringLiteral("Wait for the current run (or model load) to finish, or cancel it."));
    return false;
  }
  if (!pipeline_) {
    emit errorOccurred(QStringLiteral("No model is loaded. Choose a model folder or file and press Load."));
    return false;
  }
  ahead_waiting_.reset();  // the job encodes what it needs; one encoding in flight finishes first
  auto state = std::make_shared<JobState>();
  state->first_number = runs_completed_ + 1;
  state->kind = job.kind;
  job_ = state;
  Job work = job;
  if (work.seeds.empty()) work.seeds = {work.request.seed};
  const int runs = static_cast<int>(work.seeds.size());
  tracker_.startJob(runs, 0.0);
  clock_.start();

  auto pipe = pipeline_;
  auto model = model_;
  job_watcher_.setFuture(
      QtConcurrent::run(&pool_, [this, pipe, model, work, state](QPromise<RunPtr>& promise) {
        const int runs = static_cast<int>(work.seeds.size());
        try {
          for (int k = 0; k < runs; ++k) {
            if (state->cancel.cancelled() || promise.isCanceled()) throw Cancelled();
            GenerationRequest req = work.request;
            req.seed = work.seeds[k];
            const ResolvedRequest resolved = pipe->resolve(req);  // a clear error before any work
            const int D = resolved.signature.devices, B = resolved.signature.batch,
                      steps = resolved.signature.steps;
            const QString sig = QString::fromStdString(resolved.signature.str());
            postTo(this, [this, k, runs, D, B, steps, sig] { onRunStarted(k, runs, D, B, steps, sig); });

            std::vector<Clock::time_point> last_preview(D, Clock::time_point{});
            auto progress = [this](const ProgressEvent& e) { postTo(this, [this, e] { onEngineEvent(e); }); };
            auto preview = [&, this](int d, int step, const Image8& img) {
              const auto now = Clock::now();
              if (d < 0 || d >= D || (now - last_preview[d] < kPreviewInterval && step < steps)) return;
              last_preview[d] = now;
              QImage q = toQImage(img);
              postTo(this, [this, d, step, q] { emit previewReady(d, step, q); });
            };
            auto record = std::make_shared<RunRecord>();
            record->result = pipe->run(req, progress, preview, &state->cancel);
            record->number = state->first_number + k;
            record->kind = work.kind;
            record->index_in_job = k;
            record->runs_in_job = runs;
            record->finished_at = QDateTime::currentDateTime();
            record->request = req;
            record->model = model;
            for (const Image8& im : result_images(record->result)) record->images.push_back(toQImage(im));
            promise.addResult(RunPtr(record));
          }
        } catch (const Cancelled&) {
          state->cancelled = true;
        } catch (...) {
          state->error = describeFailure(std::current_exception());
        }
      }));
  emit jobStarted(runs);
  emit busyChanged(true);
  return true;
}

void GenerationController::cancel() {
  if (job_) job_->cancel.cancel();
  cancelSheet();
}

void GenerationController::waitForIdle() {
  ahead_waiting_.reset();
  job_watcher_.waitForFinished();
  load_watcher_.waitForFinished();
  sheet_watcher_.waitForFinished();
  ahead_watcher_.waitForFinished();
}

bool GenerationController::encodePromptsAhead(const GenerationRequest& request) {
  if (isBusy() || !pipeline_) return false;
  if (isEncodingAhead()) {
    ahead_waiting_ = request;  // the newest inputs replace any waiting ones
    return true;
  }
  ahead_watcher_.setFuture(QtConcurrent::run(&pool_, [pipe = pipeline_, request] {
    try {
      return pipe->encode_prompts(request);
    } catch (...) {
      return -1.0;  // e.g. a size the model cannot make: the run says so
    }
  }));
  return true;
}

void GenerationController::onAheadFinished() {
  emit promptsEncodedAhead(ahead_watcher_.result());
  if (auto next = std::exchange(ahead_waiting_, std::nullopt)) encodePromptsAhead(*next);
}

void GenerationController::onRunStarted(int index, int runs, int devices, int batch, int steps,
                                        const QString& signature) {
  tracker_.startRun(index, devices, steps);
  emit runStarted(index, runs, devices, batch, signature);
  emit progressChanged();
}

void GenerationController::onEngineEvent(const ProgressEvent& event) {
  tracker_.onEvent(event);
  emit progressChanged();
}

void GenerationController::onResultReady(int index) {
  const RunPtr run = job_watcher_.resultAt(index);
  runs_completed_ = std::max(runs_completed_, run->number);
  tracker_.finishRun();
  emit progressChanged();
  emit runFinished(run);
}

void GenerationController::onJobFinished() {
  const auto state = job_;
  JobOutcome outcome = JobOutcome::Completed;
  if (state && state->cancelled) {
    outcome = JobOutcome::Cancelled;
  } else if (state && !state->error.isEmpty()) {
    outcome = JobOutcome::Failed;
    emit errorOccurred(state->error);
  }
  emit jobFinished(outcome);
  emit busyChanged(isBusy());
}

}  // namespace octodiff::gui
