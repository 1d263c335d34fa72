// MainWindow's few-step, LoRA and decoder parts: the model's recommended steps and guidance on
// load (few_step.h), the few-step preset, the LoRA panel's selection and prompt tags merged into
// the model before a run (GenerationController::applyLoras), and the TAESD loaded with the model.
// Split from main_window.cpp, which holds the layout and the run wiring.
#include <QDir>
#include <QFileInfo>
#include <QStatusBar>

#include "main_window.h"

namespace octodiff::gui {
namespace {

QString loraNames(const StableDiffusionModel& m) {
  QStringList names;
  for (const AppliedLora& l : m.loras()) names << QStringLiteral("%1 %2").arg(QString::fromStdString(l.name)).arg(l.spec.strength);
  return names.join(QStringLiteral(", "));
}

bool sameLoras(const std::vector<LoraSpec>& a, const std::vector<LoraSpec>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const LoraSpec& x, const LoraSpec& y) {
    return x.path == y.path && x.strength == y.strength;
  });
}

}  // namespace

void MainWindow::buildFastPanels() {
  few_step_ = new FewStepPanel;
  few_step_->setObjectName(QStringLiteral("fewStepPanel"));
  connect(few_step_, &FewStepPanel::presetRequested, this, &MainWindow::applyFewStepPreset);

  lora_panel_ = new LoraPanel;
  lora_panel_->setObjectName(QStringLiteral("loraPanel"));
  lora_apply_timer_.setSingleShot(true);
  lora_apply_timer_.setInterval(400);
  connect(&lora_apply_timer_, &QTimer::timeout, this, &MainWindow::applyLorasNow);
  connect(lora_panel_, &LoraPanel::folderChosen, this, [this](const QString& f) { settings_.setLoraFolder(f); });
  connect(lora_panel_, &LoraPanel::selectionChanged, this, [this] {
    settings_.setLoraSelection(lora_panel_->model()->selectionText());
    if (live_->isActive())
      live_->inputsChanged();  // the live run merges them first
    else
      lora_apply_timer_.start();
  });
  connect(controller_, &GenerationController::lorasApplied, this, &MainWindow::onLorasApplied);
  connect(controller_, &GenerationController::lorasFailed, this, &MainWindow::onLorasFailed);
  connect(controller_, &GenerationController::lorasApplying, this, [this] {
    lora_panel_->setStatus(tr("Merging LoRAs into the model…"));
    statusBar()->showMessage(tr("Merging LoRAs…"));
  });

  decoder_panel_ = new DecoderPanel;
  decoder_panel_->setObjectName(QStringLiteral("decoderPanel"));
  connect(decoder_panel_, &DecoderPanel::taesdPathChosen, this, &MainWindow::onTaesdChosen);
  connect(decoder_panel_, &DecoderPanel::decoderChanged, this, [this] {
    settings_.setDecoder(decoder_panel_->decoder());
    live_->inputsChanged();
  });
}

void MainWindow::restoreFastSettings() {
  lora_panel_->setFolder(settings_.loraFolder());
  lora_panel_->model()->setSelectionText(settings_.loraSelection());
  decoder_panel_->setTaesdPath(settings_.taesdPath());
  decoder_panel_->setDecoder(settings_.decoder());
}

void MainWindow::saveFastSettings() {
  settings_.setLoraFolder(lora_panel_->folder());
  settings_.setLoraSelection(lora_panel_->model()->selectionText());
  settings_.setTaesdPath(decoder_panel_->taesdPath());
  settings_.setDecoder(decoder_panel_->decoder());
}

SamplingValues MainWindow::currentSampling() const {
  SamplingValues v;
  v.steps = settings_panel_->stepsBox()->value();
  v.guidance = settings_panel_->guidanceBox()->value();
  GenerationRequest chosen;
  applySchedulerChoice(settings_panel_->schedulerBox()->currentData().toInt(), &chosen);
  v.scheduler = chosen.scheduler;
  v.guidance_rescale = settings_panel_->guidanceRescaleBox()->value();
  return v;
}

void MainWindow::setSampling(const SamplingValues& v) {
  settings_panel_->stepsBox()->setValue(v.steps);
  settings_panel_->guidanceBox()->setValue(v.guidance);
  QComboBox* box = settings_panel_->schedulerBox();
  const int data = v.scheduler ? static_cast<int>(*v.scheduler) : SettingsPanel::kModelsOwnScheduler;
  box->setCurrentIndex(std::max(0, box->findData(data)));
  settings_panel_->guidanceRescaleBox()->setValue(v.guidance_rescale);
}

void MainWindow::adviseSamplingFor(const StableDiffusionModel& model) {
  const FewStepProfile profile = recognizeFewStep(model);
  const SamplingAdvice advice = adviseSampling(profile, currentSampling(), settings_.automaticSampling());
  if (advice.apply) setSampling(advice.values);
  if (advice.remember) settings_.setAutomaticSampling(advice.values);
  few_step_->setNote(advice.note);
  embedded_guidance_ = profile.kind == FewStepKind::LcmDistilled;
  updateNegativePromptUse();
}

void MainWindow::updateNegativePromptUse() {
  if (embedded_guidance_)
    prompts_->setNegativePromptUnused(tr("Not used by this model (guidance is built into its UNet)"),
                                      tr("Not used by this model: an LCM-distilled UNet takes the guidance as an "
                                         "input and runs one pass on the prompts alone"));
  else if (settings_panel_->guidanceBox()->value() <= 1.0)
    prompts_->setNegativePromptUnused(tr("Not used at guidance 1 or less"),
                                      tr("Not used at guidance 1 or less: each step is one pass on the prompts alone"));
  else
    prompts_->setNegativePromptUnused(QString(), QString());
}

void MainWindow::applyFewStepPreset() {
  setSampling(lcmLoraPreset());
  few_step_->setNote(tr("Few-step preset: %1 — for a model with an LCM-LoRA (check it under LoRA)")
                         .arg(describeSampling(lcmLoraPreset())));
  live_->inputsChanged();
}

void MainWindow::showModelExtras(const StableDiffusionModel& model) {
  const QString taesd = decoder_panel_->taesdPath();
  if (model.tiny_autoencoder())
    decoder_panel_->showTaesdLoaded(true, QFileInfo(taesd).fileName());
  else
    decoder_panel_->showTaesdLoaded(false, taesd.isEmpty() ? QString() : tr("see the message above"));
  if (!controller_->loadWarning().isEmpty()) reportError(controller_->loadWarning());
  lora_panel_->setStatus(lora_panel_->selection().empty() ? tr("No LoRA merged.")
                                                          : tr("The checked LoRAs are merged before the next run."));
  if (!live_->isActive()) lora_apply_timer_.start();  // live mode's run merges them itself
}

bool MainWindow::takePromptLoras(GenerationRequest* r, std::vector<LoraSpec>* loras, QString* error) const {
  *loras = lora_panel_->selection();
  const QString folder = lora_panel_->folder();
  try {
    PromptLoras tagged = extract_prompt_loras(
        r->prompts, folder.isEmpty() ? std::filesystem::path() : std::filesystem::path(QFileInfo(folder).absoluteFilePath().toStdString()));
    r->prompts = std::move(tagged.prompts);
    for (const LoraSpec& t : tagged.loras) {
      auto same = std::find_if(loras->begin(), loras->end(), [&](const LoraSpec& l) {
        return l.path.lexically_normal() == t.path.lexically_normal();
      });
      if (same == loras->end())
        loras->push_back(t);
      else
        same->strength = t.strength;  // the prompt's tag wins
    }
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    return false;
  }
  return true;
}

bool MainWindow::applyLorasNow() {
  if (controller_->isBusy() || !controller_->model()) return false;
  QString error;
  auto request = requestFromForm(&error);
  std::vector<LoraSpec> loras = lora_panel_->selection();
  if (request) takePromptLoras(&*request, &loras, &error);  // a half-typed tag: the panel's alone
  if (controller_->hasLoras(loras)) return false;
  return applyLorasThen(loras, {});
}

bool MainWindow::applyLorasThen(const std::vector<LoraSpec>& loras, std::function<void()> then) {
  lora_apply_timer_.stop();
  if (retrying_after_merge_ && sameLoras(loras, merged_loras_)) {  // merged, yet not what was asked: never loop
    reportError(tr("The model does not report the LoRAs just merged; the run was not started."));
    return false;
  }
  if (!controller_->applyLoras(loras)) return false;
  banner_->dismiss();
  merged_loras_ = loras;
  pending_run_ = {};
  if (then)
    pending_run_ = [this, then = std::move(then)] {
      retrying_after_merge_ = true;
      then();
      retrying_after_merge_ = false;
    };
  return true;
}

void MainWindow::onLorasApplied(double seconds) {
  const ModelPtr m = controller_->model();
  const QString names = loraNames(*m);
  lora_panel_->setStatus(names.isEmpty() ? tr("No LoRA merged.")
                                         : tr("Merged: %1 (%2)").arg(names, formatDuration(seconds)));
  statusBar()->showMessage(names.isEmpty() ? tr("LoRAs removed") : tr("LoRAs merged: %1").arg(names), 8000);
  if (auto run = std::exchange(pending_run_, {}))
    QMetaObject::invokeMethod(this, run, Qt::QueuedConnection);
  else
    live_->inputsChanged();  // e.g. live mode was switched on while they were merged
}

void MainWindow::onLorasFailed(const QString& message) {
  pending_run_ = {};
  const ModelPtr m = controller_->model();
  const QString names = m ? loraNames(*m) : QString();
  lora_panel_->setStatus(tr("Not merged — see the message above. The model has %1.")
                             .arg(names.isEmpty() ? tr("no LoRA") : names));
  reportError(tr("Could not merge the LoRAs:\n%1").arg(message));
}

void MainWindow::restoreLorasAndDecoder(const ImageMetadata& m, QStringList* notes) {
  LoraListModel* list = lora_panel_->model();
  QStringList wanted;
  for (const ImageMetadata::Lora& l : m.loras) {
    const QString name = QString::fromStdString(l.name);
    if (list->rowOf(name) < 0)
      *notes << tr("the LoRA '%1' is not in the LoRA folder").arg(name);
    else
      wanted << QStringLiteral("%1=%2").arg(name).arg(l.strength);
  }
  list->setSelectionText(wanted);
  decoder_panel_->setDecoder(m.decoder);
  const ModelPtr model = controller_->model();
  if (m.decoder == Decoder::Tiny && (!model || !model->tiny_autoencoder()))
    *notes << tr("it was decoded with a TAESD and none is loaded (choose one under Decoder)");
}

void MainWindow::onTaesdChosen(const QString& path) {
  settings_.setTaesdPath(path);
  // Choosing a TAESD selects it (as octodiff-cli --taesd does); clearing the path goes back to the VAE.
  decoder_panel_->setDecoder(path.isEmpty() ? Decoder::Vae : Decoder::Tiny);
  // The TAESD is loaded with the model: load the current one again (its weight cache makes it quick).
  const QString model = settings_.modelPath();
  if (!model.isEmpty()) loadModel(model, settings_.tokenizerDir());
}

}  // namespace octodiff::gui
