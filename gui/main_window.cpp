#include "main_window.h"

#include <QCloseEvent>
#include <QFileInfo>
#include <QGroupBox>
#include <QLabel>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QVBoxLayout>

#include "default_model.h"
#include "image_metadata_io.h"

namespace octodiff::gui {
namespace {

QGroupBox* section(const QString& title, QWidget* content) {
  auto* box = new QGroupBox(title);
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(8, 6, 8, 8);
  layout->addWidget(content);
  return box;
}

}  // namespace

MainWindow::MainWindow(const MainWindowOptions& options, QWidget* parent) : QMainWindow(parent) {
  setObjectName(QStringLiteral("mainWindow"));
  setWindowTitle(QStringLiteral("Octodiff"));
  setAcceptDrops(true);
  controller_ = new GenerationController(this);
  buildInitPanel();

  banner_ = new ErrorBanner;
  QWidget* results = buildResultsColumn();
  auto* body = new QSplitter(Qt::Horizontal);
  body->addWidget(buildFormColumn());
  body->addWidget(results);
  body->setStretchFactor(1, 1);
  body->setSizes({400, 1000});
  body->setChildrenCollapsible(false);

  auto* central = new QWidget;
  auto* column = new QVBoxLayout(central);
  column->setContentsMargins(6, 6, 6, 0);
  column->setSpacing(6);
  column->addWidget(banner_);
  column->addWidget(body, 1);
  setCentralWidget(central);
  buildMenus();
  connectController();
  connectViews();
  restoreSession(options);
}

QWidget* MainWindow::buildResultsColumn() {
  grid_ = new ResultGridView;
  grid_->setObjectName(QStringLiteral("resultGrid"));
  comparison_ = new SeedComparisonView;
  comparison_->setObjectName(QStringLiteral("seedComparison"));
  tabs_ = new QTabWidget;
  tabs_->setDocumentMode(true);
  tabs_->addTab(grid_, tr("Results"));
  tabs_->addTab(comparison_, tr("Seed comparison"));
  sheet_ = new ComparisonSheetView;
  sheet_->setObjectName(QStringLiteral("comparisonSheet"));
  tabs_->addTab(sheet_, tr("Comparison sheet"));
  tabs_->addTab(init_panel_->maskEditor(), tr("Mask"));
  timings_ = new TimingsPanel;
  timings_->setObjectName(QStringLiteral("timingsPanel"));

  auto* timings_box =
      section(tr("Timings: compile vs inference, and every run since the app started"), timings_);
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(tabs_);
  right->addWidget(timings_box);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 1);
  right->setSizes({600, 290});
  right->setChildrenCollapsible(false);
  return right;
}

void MainWindow::connectViews() {
  connectImageActions(grid_);
  connectImageActions(comparison_);
  connect(comparison_, &SeedComparisonView::runRequested, this, &MainWindow::runSeedComparison);
  connect(comparison_, &SeedComparisonView::errorOccurred, this, &MainWindow::reportError);
  connect(comparison_, &SeedComparisonView::saveGridRequested, this, &MainWindow::saveGridDialog);
  connectSheet();
  progress_timer_.setInterval(250);
  connect(&progress_timer_, &QTimer::timeout, this, &MainWindow::refreshProgress);
}

void MainWindow::restoreSession(const MainWindowOptions& options) {
  const FormState form = settings_.form();
  setFormState(form);
  comparison_->setSeedsText(settings_.comparisonSeeds());
  restoreFastSettings();
  model_chooser_->setRecent(settings_.recentModels());
  model_chooser_->setStartFolder(settings_.lastFolder());
  QString model = options.modelPath, tokenizer = options.tokenizerDir;
  if (model.isEmpty()) {
    model = settings_.modelPath();
    tokenizer = settings_.tokenizerDir();
    if (model.isEmpty() || !QFileInfo::exists(model)) {
      model = defaultModelPath();
      tokenizer.clear();
    }
  }
  model_chooser_->setPath(model);
  model_chooser_->setTokenizerDir(tokenizer);
  resize(1400, 900);
  if (!settings_.windowGeometry().isEmpty()) restoreGeometry(settings_.windowGeometry());
  onBusyChanged();
  if (options.loadModel) loadModel(model, tokenizer);
}

MainWindow::~MainWindow() {
  // The worker may still be running (e.g. the window deleted without closing): stop it first.
  controller_->cancel();
  controller_->waitForIdle();
  disconnect(controller_, nullptr, this, nullptr);
}

QWidget* MainWindow::buildFormColumn() {
  model_chooser_ = new ModelChooser;
  prompts_ = new PromptPanel;
  settings_panel_ = new SettingsPanel;
  progress_ = new ProgressPanel;
  buildFastPanels();
  buildControlNetPanel();

  generate_ = new QPushButton(tr("Generate"));
  generate_->setObjectName(QStringLiteral("generate"));
  generate_->setDefault(true);
  generate_->setMinimumHeight(36);
  generate_->setToolTip(tr("Generate one image per prompt (Ctrl+Return)"));
  generate_->setStyleSheet(
      QStringLiteral("QPushButton { font-weight: bold; font-size: 11pt; background: #2b6cb0; color: white; "
                     "border-radius: 4px; }"
                     "QPushButton:disabled { background: #9db3c8; }"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setObjectName(QStringLiteral("cancel"));
  cancel_->setMinimumHeight(36);
  cancel_->setToolTip(tr("Stop the run within one UNet call (Esc)"));
  connect(generate_, &QPushButton::clicked, this, &MainWindow::generate);
  connect(cancel_, &QPushButton::clicked, this, &MainWindow::cancel);
  connect(prompts_, &PromptPanel::submitted, this, &MainWindow::generate);
  connect(model_chooser_, &ModelChooser::loadRequested, this, &MainWindow::loadModel);
  connect(model_chooser_, &ModelChooser::folderChosen, this,
          [this](const QString& f) { settings_.setLastFolder(f); });
  connect(progress_, &ProgressPanel::previewToggled, this, [this](bool) { saveSettings(); });

  live_box_ = new QCheckBox(tr("Live"));
  live_box_->setObjectName(QStringLiteral("live"));
  live_box_->setToolTip(tr("Regenerate while you type, keeping the seed: a pause of %1 ms starts a run and "
                           "cancels the one in flight. Best with a few-step model (1–8 steps).")
                            .arg(LiveMode::kDefaultDelayMs));
  live_ = new LiveMode(controller_, this);
  connect(live_box_, &QCheckBox::toggled, live_, &LiveMode::setActive);
  connect(live_, &LiveMode::regenerateRequested, this, &MainWindow::generateKeepingSeed);
  connect(live_, &LiveMode::encodeAheadRequested, this, &MainWindow::encodeLivePromptsAhead);
  connect(prompts_, &PromptPanel::promptsChanged, live_, &LiveMode::inputsChanged);
  connect(prompts_->negativeField(), &QLineEdit::textChanged, live_, &LiveMode::inputsChanged);
  connect(settings_panel_->guidanceBox(), &QDoubleSpinBox::valueChanged, this, &MainWindow::updateNegativePromptUse);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(generate_, 3);
  buttons->addWidget(cancel_, 1);
  buttons->addWidget(live_box_);

  auto* content = new QWidget;
  auto* column = new QVBoxLayout(content);
  column->setContentsMargins(0, 0, 4, 0);
  column->setSpacing(6);
  column->addWidget(section(tr("Model"), model_chooser_));
  column->addWidget(section(tr("Prompts: one device each (empty fields are skipped)"), prompts_));
  column->addWidget(section(tr("Settings"), settings_panel_));
  column->addWidget(few_step_);
  column->addLayout(buttons);
  column->addWidget(section(tr("Progress"), progress_));
  column->addWidget(section(tr("Image to image"), init_panel_));
  column->addWidget(section(tr("ControlNet"), controlnet_panel_));
  column->addWidget(section(tr("LoRA"), lora_panel_));
  column->addWidget(section(tr("Decoder"), decoder_panel_));
  column->addStretch(1);

  auto* scroll = new QScrollArea;
  scroll->setObjectName(QStringLiteral("formScroll"));
  scroll->setWidget(content);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setMinimumWidth(380);
  return scroll;
}

void MainWindow::connectController() {
  auto* c = controller_;
  connect(c, &GenerationController::modelLoading, this, [this](const QString& path) {
    model_chooser_->showLoading(path);
    statusBar()->showMessage(tr("Loading model %1 …").arg(path));
  });
  connect(c, &GenerationController::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(c, &GenerationController::modelLoadFailed, this,
          [this](const QString& path, const QString& message) {
            pending_run_ = {};
            model_chooser_->showFailed(message);
            reportError(tr("Could not load the model %1:\n%2").arg(path, message));
          });
  connect(c, &GenerationController::runStarted, this,
          [this](int index, int runs, int devices, int batch, const QString&) {
            static_cast<void>(runs);
            onRunStarted(index, runs, devices, batch);
          });
  connect(c, &GenerationController::progressChanged, this, &MainWindow::refreshProgress);
  connect(c, &GenerationController::previewReady, this, &MainWindow::onPreview);
  connect(c, &GenerationController::runFinished, this, &MainWindow::onRunFinished);
  connect(c, &GenerationController::jobFinished, this, &MainWindow::onJobFinished);
  connect(c, &GenerationController::errorOccurred, this, &MainWindow::reportError);
  connect(c, &GenerationController::busyChanged, this, &MainWindow::onBusyChanged);
}

void MainWindow::connectImageActions(QObject* source) {
  // ResultGridView and SeedComparisonView carry the same four per-image signals.
  if (auto* g = qobject_cast<ResultGridView*>(source)) {
    connect(g, &ResultGridView::enlargeRequested, this, &MainWindow::enlarge);
    connect(g, &ResultGridView::saveRequested, this, &MainWindow::saveImageDialog);
    connect(g, &ResultGridView::copyRequested, this, &MainWindow::copyImage);
    connect(g, &ResultGridView::reuseRequested, this, &MainWindow::reuseSettings);
    connect(g, &ResultGridView::varyRequested, this, &MainWindow::vary);
  } else if (auto* s = qobject_cast<SeedComparisonView*>(source)) {
    connect(s, &SeedComparisonView::enlargeRequested, this, &MainWindow::enlarge);
    connect(s, &SeedComparisonView::saveRequested, this, &MainWindow::saveImageDialog);
    connect(s, &SeedComparisonView::copyRequested, this, &MainWindow::copyImage);
    connect(s, &SeedComparisonView::reuseRequested, this, &MainWindow::reuseSettings);
    connect(s, &SeedComparisonView::varyRequested, this, &MainWindow::vary);
  }
}

FormState MainWindow::formState() const {
  FormState f;
  f.prompts = prompts_->prompts();
  f.negative_prompt = prompts_->negativePrompt();
  settings_panel_->applyTo(&f.request);
  f.seed_locked = settings_panel_->seedLocked();
  f.preview = progress_->previewEnabled();
  return f;
}

void MainWindow::setFormState(const FormState& f) {
  prompts_->setPrompts(f.prompts);
  prompts_->setNegativePrompt(f.negative_prompt);
  settings_panel_->setFrom(f.request);
  settings_panel_->setSeedLocked(f.seed_locked);
  progress_->setPreviewEnabled(f.preview);
  if (f.request.devices != 0 || f.request.batch_per_device != 1) settings_panel_->setAdvancedVisible(true);
}

std::optional<GenerationRequest> MainWindow::requestFromForm(QString* error) const {
  GenerationRequest r;
  settings_panel_->applyTo(&r);
  for (const QString& p : prompts_->nonEmptyPrompts()) r.prompts.push_back(p.toStdString());
  if (r.prompts.empty()) {
    if (r.devices == 0) {
      *error =
          tr("Type a prompt in at least one of the eight fields (or set a device count under Advanced "
             "to generate from the empty prompt).");
      return std::nullopt;
    }
    r.prompts = {""};
  }
  // An LCM-distilled model reads no negative prompt (the field is greyed out, its text kept for the
  // next model): not sent, so neither the run's warning nor the PNG's metadata names it.
  if (!prompts_->negativePrompt().isEmpty() && !embedded_guidance_)
    r.negative_prompts = {prompts_->negativePrompt().toStdString()};
  r.preview = progress_->previewEnabled();
  r.decoder = decoder_panel_->decoder();
  init_panel_->applyTo(&r);  // image to image when there is an init image
  if (!controlnet_panel_->applyTo(&r, error)) return std::nullopt;
  return r;
}

std::optional<GenerationRequest> MainWindow::runRequestFromForm(std::vector<LoraSpec>* loras,
                                                                QString* error) const {
  auto request = requestFromForm(error);
  if (request && !takePromptLoras(&*request, loras, error)) request.reset();
  return request;
}

bool MainWindow::generate() {
  if (init_panel_->seedComparisonWanted()) return runInitSeedComparison();
  return generateFromForm(/*live=*/false);
}

bool MainWindow::generateKeepingSeed() { return generateFromForm(/*live=*/true); }

bool MainWindow::generateFromForm(bool live) {
  if (controller_->isBusy()) return false;
  QString error;
  std::vector<LoraSpec> loras;
  auto request = runRequestFromForm(&loras, &error);
  if (!request) {
    if (live)
      statusBar()->showMessage(tr("Live: %1").arg(error));  // mid-typing: no banner for a half-written form
    else
      reportError(error);
    return false;
  }
  if (reloadModelForDtypeThen(request->dtype, [this, live] { generateFromForm(live); })) return true;
  if (!controller_->hasLoras(loras))  // merge them first, then read the form again
    return applyLorasThen(loras, [this, live] { generateFromForm(live); });
  if (!ControlNetPanel::modelsLoaded(*request))
    return loadControlNetsThen(request->dtype, [this, live] { generateFromForm(live); });
  if (!live && !settings_panel_->seedLocked()) request->seed = settings_panel_->randomizeSeed();
  return startJob(Job{JobKind::Generate, *request, {request->seed}});
}

bool MainWindow::encodeLivePromptsAhead() {
  const ModelPtr m = controller_->model();
  if (!m || controller_->isBusy()) return false;
  QString error;
  std::vector<LoraSpec> loras;
  auto request = runRequestFromForm(&loras, &error);
  if (!request) return false;
  // A run that reloads the model or merges LoRAs first encodes with another pipeline.
  if (m->dtype() != request->dtype || !controller_->hasLoras(loras) ||
      !ControlNetPanel::modelsLoaded(*request))
    return false;
  return controller_->encodePromptsAhead(*request);
}

bool MainWindow::runSeedComparison(JobKind kind, const std::vector<int64_t>& seeds) {
  if (controller_->isBusy()) return false;
  QString error;
  std::vector<LoraSpec> loras;
  auto request = runRequestFromForm(&loras, &error);
  if (!request) {
    reportError(error);
    return false;
  }
  if (reloadModelForDtypeThen(request->dtype, [this, kind, seeds] { runSeedComparison(kind, seeds); })) return true;
  if (!controller_->hasLoras(loras))
    return applyLorasThen(loras, [this, kind, seeds] { runSeedComparison(kind, seeds); });
  if (!ControlNetPanel::modelsLoaded(*request))
    return loadControlNetsThen(request->dtype, [this, kind, seeds] { runSeedComparison(kind, seeds); });
  if (kind == JobKind::SeedSweep) {
    request->prompts = {request->prompts.front()};
    request->devices = 1;
    request->batch_per_device = 1;
  }
  settings_.setComparisonSeeds(comparison_->seedsText());
  comparison_->setMode(kind);
  return startJob(Job{kind, *request, seeds});
}

bool MainWindow::startJob(const Job& job) {
  banner_->dismiss();
  saveSettings();
  job_ = job;
  if (job.kind == JobKind::Generate) {
    tabs_->setCurrentWidget(grid_);
  } else {
    tabs_->setCurrentWidget(comparison_);
    comparison_->beginJob(job.kind, job.seeds);
  }
  progress_->begin(1);
  if (!controller_->start(job)) return false;
  statusBar()->showMessage(tr("Running…"));
  return true;
}

void MainWindow::cancel() {
  if (!controller_->isGenerating()) return;
  controller_->cancel();
  progress_->finish(tr("Cancelling… (within one UNet call)"));
}

void MainWindow::loadModel(const QString& path, const QString& tokenizerDir) {
  if (controller_->isBusy()) {
    reportError(tr("Wait for the current run to finish (or cancel it) before loading another model."));
    return;
  }
  controller_->loadModel(path, tokenizerDir, decoder_panel_->taesdPath(), settings_panel_->dtype());
}

bool MainWindow::reloadModelForDtypeThen(ComputeDType dtype, std::function<void()> then) {
  const ModelPtr m = controller_->model();
  if (!m || m->dtype() == dtype || model_path_.isEmpty()) return false;
  // The LoRAs are merged again by the run that follows (the reloaded model has none).
  if (!controller_->loadModel(model_path_, model_chooser_->tokenizerDir(), decoder_panel_->taesdPath(), dtype))
    return false;
  banner_->dismiss();
  statusBar()->showMessage(tr("Loading the model again for %1…").arg(dtype == ComputeDType::BF16 ? tr("bfloat16")
                                                                                                   : tr("float32")));
  pending_run_ = std::move(then);
  return true;
}

void MainWindow::onModelLoaded(const QString& path, double seconds) {
  const ModelPtr m = controller_->model();
  const QString label = modelLabel(path);
  model_chooser_->showLoaded(label, QString::fromStdString(m->description()), seconds);
  settings_panel_->setModelSize(m->default_width(), m->default_height(), m->size_multiple());
  init_panel_->setModelSize(m->default_width(), m->default_height(), m->size_multiple());
  settings_panel_->setModelScheduler(m->default_scheduler(), m->default_scheduler_has_karras_sigmas());
  settings_panel_->setModelNoiseSchedule(m->default_scheduler_has_zero_snr());
  adviseSamplingFor(*m);
  settings_.setModel(path, model_chooser_->tokenizerDir());
  settings_.addRecentModel(path);
  model_chooser_->setRecent(settings_.recentModels());
  model_chooser_->setPath(path);
  setWindowTitle(tr("Octodiff — %1").arg(label));
  QString status = tr("Model %1 ready: %2, %3×%4 by default")
                       .arg(label, QString::fromStdString(m->description()))
                       .arg(m->default_width())
                       .arg(m->default_height());
  // E.g. the weight cache could not be written (disk full): the model works, using more memory.
  const auto notes = m->load_notes();
  for (const auto& note : notes) status += QStringLiteral(" — ") + QString::fromStdString(note);
  shown_load_notes_ = notes.size();
  statusBar()->showMessage(status);
  showModelExtras(*m);
  model_path_ = path;
  emit modelReady(path);
  if (auto run = std::exchange(pending_run_, {}))  // a run that waited for this (re)load
    QMetaObject::invokeMethod(this, run, Qt::QueuedConnection);
}

void MainWindow::onRunStarted(int index, int runs, int devices, int batch) {
  static_cast<void>(runs);
  QStringList prompts;
  for (const auto& p : job_.request.prompts) prompts << QString::fromStdString(p);
  if (job_.kind == JobKind::Generate)
    grid_->beginRun(prompts, devices, batch, job_.seeds.at(index));
  else
    comparison_->beginRun(index, prompts, devices, batch);
  progress_->begin(devices);
  refreshProgress();
}

void MainWindow::onPreview(int device, int step, const QImage& image) {
  if (!progress_->previewEnabled()) return;
  const int steps = controller_->progress().stepsPerDevice();
  if (job_.kind == JobKind::Generate)
    grid_->showPreview(device, step, steps, image);
  else
    comparison_->showPreview(device, step, steps, image);
}

void MainWindow::onRunFinished(const RunPtr& run) {
  last_run_ = run;
  timings_->addRun(*run);
  if (run->kind == JobKind::Generate)
    grid_->showRun(run);
  else
    comparison_->addRun(run);
  for (const auto& w : run->result.warnings) banner_->showNote(QString::fromStdString(w));
  // A first load's weight cache is written while the model already runs: a failure to keep it
  // (e.g. the disk filled up) is known only later.
  if (const ModelPtr m = controller_->model()) {
    const auto notes = m->load_notes();
    for (size_t i = shown_load_notes_; i < notes.size(); ++i) banner_->showNote(QString::fromStdString(notes[i]));
    shown_load_notes_ = std::max(shown_load_notes_, notes.size());
  }
  emit runDisplayed(run);
}

void MainWindow::onJobFinished(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::Completed: {
      refreshProgress();
      const auto& t = last_run_ ? last_run_->result.timings : Timings{};
      progress_->finish(tr("Done in %1").arg(formatDuration(controller_->jobSeconds())));
      statusBar()->showMessage(last_run_
                                   ? tr("Run #%1 done: %2 (%3)")
                                         .arg(last_run_->number)
                                         .arg(formatDuration(t.total))
                                         .arg(last_run_->result.compiled ? tr("compiled") : tr("cached plan"))
                                   : tr("Done"));
      break;
    }
    case JobOutcome::Cancelled:
      progress_->finish(tr("Cancelled after %1").arg(formatDuration(controller_->jobSeconds())));
      statusBar()->showMessage(tr("Cancelled"));
      grid_->markStopped(tr("cancelled"));
      comparison_->markStopped(tr("cancelled"));
      break;
    case JobOutcome::Failed:
      progress_->finish(tr("Failed"));
      grid_->markStopped(tr("failed — see the message above"));
      comparison_->markStopped(tr("failed"));
      break;
  }
  emit jobDone(outcome);
}

void MainWindow::onBusyChanged() {
  const bool busy = controller_->isBusy();
  generate_->setEnabled(!busy);
  cancel_->setEnabled(controller_->isGenerating());
  model_chooser_->setBusy(busy);
  comparison_->setRunEnabled(!busy);
  sheet_->setRunEnabled(!busy);
  if (controller_->isGenerating())
    progress_timer_.start();
  else
    progress_timer_.stop();
}

void MainWindow::refreshProgress() {
  progress_->update(controller_->progress(), controller_->jobSeconds());
}

void MainWindow::reportError(const QString& message) {
  banner_->showError(message);
  statusBar()->showMessage(message.section('\n', 0, 0), 10000);
  emit errorShown(message);
}

void MainWindow::saveSettings() {
  settings_.setForm(formState());
  saveFastSettings();
  settings_.setWindowGeometry(saveGeometry());
  settings_.sync();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  saveSettings();
  // Closing during a run cancels it; the worker stops within one UNet call and is waited for.
  controller_->cancel();
  controller_->waitForIdle();
  event->accept();
}

}  // namespace octodiff::gui
