// MainWindow: the form on the left (model, eight prompts, settings, Generate/Cancel, progress),
// the results in the middle (the grid, the seed comparison) and the timings below them.
// All heavy work goes through GenerationController; problems show in an inline ErrorBanner and
// as the errorShown signal, never as a modal box.
#pragma once

#include <QCheckBox>
#include <QMainWindow>
#include <QPushButton>
#include <QTabWidget>
#include <QTimer>

#include <functional>

#include "app_settings.h"
#include "controlnet_panel.h"
#include "decoder_panel.h"
#include "error_banner.h"
#include "few_step_panel.h"
#include "generation_controller.h"
#include "image_dialog.h"
#include "init_image_panel.h"
#include "live_mode.h"
#include "lora_panel.h"
#include "model_chooser.h"
#include "pipeline/metadata.h"
#include "progress_panel.h"
#include "prompt_panel.h"
#include "result_grid_view.h"
#include "comparison_sheet_view.h"
#include "seed_comparison_view.h"
#include "settings_panel.h"
#include "timings_panel.h"

namespace octodiff::gui {

struct MainWindowOptions {
  QString modelPath;  // empty: the remembered model, else the default one
  QString tokenizerDir;
  bool loadModel = true;  // start loading it right away (off the UI thread)
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(const MainWindowOptions& options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  GenerationController* controller() const { return controller_; }
  ModelChooser* modelChooser() const { return model_chooser_; }
  PromptPanel* promptPanel() const { return prompts_; }
  SettingsPanel* settingsPanel() const { return settings_panel_; }
  ProgressPanel* progressPanel() const { return progress_; }
  ResultGridView* resultGrid() const { return grid_; }
  SeedComparisonView* seedComparison() const { return comparison_; }
  ComparisonSheetView* comparisonSheet() const { return sheet_; }
  TimingsPanel* timingsPanel() const { return timings_; }
  ErrorBanner* errorBanner() const { return banner_; }
  QPushButton* generateButton() const { return generate_; }
  QCheckBox* liveBox() const { return live_box_; }
  LiveMode* liveMode() const { return live_; }
  QPushButton* cancelButton() const { return cancel_; }
  QTabWidget* tabs() const { return tabs_; }
  FewStepPanel* fewStepPanel() const { return few_step_; }
  LoraPanel* loraPanel() const { return lora_panel_; }
  DecoderPanel* decoderPanel() const { return decoder_panel_; }
  InitImagePanel* initImagePanel() const { return init_panel_; }
  ControlNetPanel* controlNetPanel() const { return controlnet_panel_; }
  MaskEditor* maskEditor() const { return init_panel_->maskEditor(); }
  RunPtr lastRun() const { return last_run_; }

  FormState formState() const;
  void setFormState(const FormState& form);
  // The request the form describes; empty optional and `error` when it cannot describe one.
  std::optional<GenerationRequest> requestFromForm(QString* error) const;
  // The LoRAs a run of `request` needs: the LoRA panel's checked files, and the prompts'
  // <lora:NAME:STRENGTH> tags resolved against the panel's folder (removed from the prompts; a
  // tag's strength wins over the panel's for the same file). False and `error` for a bad tag.
  bool takePromptLoras(GenerationRequest* request, std::vector<LoraSpec>* loras, QString* error) const;
  // requestFromForm with its prompts' LoRA tags taken (takePromptLoras): what a run of the form
  // asks for and the LoRAs it needs; nothing and `error` when either fails.
  std::optional<GenerationRequest> runRequestFromForm(std::vector<LoraSpec>* loras, QString* error) const;

 public slots:
  bool generate();
  // A run with the form as it is, keeping the seed (live mode's regenerations).
  bool generateKeepingSeed();
  // Live mode's encoding ahead: the form's prompts into the pipeline's text-encoding cache, when
  // a run of the form would use this model as it is (same dtype, LoRAs and loaded ControlNets);
  // false when it did not start (a half-written form is the run's to report).
  bool encodeLivePromptsAhead();
  void cancel();
  bool runSeedComparison(octodiff::gui::JobKind kind, const std::vector<int64_t>& seeds);
  // The form's first prompt and settings as an X/Y(/Z) sheet (main_window_sheet.cpp).
  bool runSheet(const octodiff::SheetSpec& spec);
  void loadModel(const QString& path, const QString& tokenizerDir);
  // The model with the LoRA panel's selection (and the prompts' tags), off the UI thread, when
  // it does not have exactly those already; false when nothing needed doing or the app is busy.
  bool applyLorasNow();
  // Sets the few-step preset: LCM scheduler, 4 steps, guidance 1.5 (for an LCM-LoRA).
  void applyFewStepPreset();
  bool exportGrid(const QString& path, octodiff::gui::RunPtr run = nullptr);
  bool exportImage(const octodiff::gui::RunPtr& run, int index, const QString& path);
  bool exportAllImages(const QString& dir);
  bool importPng(const QString& path);
  void copyImage(const octodiff::gui::RunPtr& run, int index);
  void reuseSettings(const octodiff::gui::RunPtr& run, int index);
  ImageDialog* enlarge(const octodiff::gui::RunPtr& run, int index);
  void reportError(const QString& message);
  // Image to image (main_window_init.cpp): the image becomes the init image and the form takes
  // its prompt and settings; Generate then varies it (InitImagePanel's mode and strength).
  void vary(const octodiff::gui::RunPtr& run, int index);
  // A dropped or opened file: a PNG with generation settings restores them, any other image
  // becomes the init image; anything else is an error in the banner.
  void dropFile(const QString& path);

 signals:
  void errorShown(const QString& message);
  void modelReady(const QString& path);
  void runDisplayed(const octodiff::gui::RunPtr& run);
  void jobDone(octodiff::gui::JobOutcome outcome);
  void settingsRestored();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  QWidget* buildResultsColumn();  // the result tabs above the timings panel
  QWidget* buildFormColumn();
  void connectViews();  // the result views' and the comparison sheet's signals
  // The last session's form and model (options.modelPath first), then the model loaded when
  // options.loadModel.
  void restoreSession(const MainWindowOptions& options);
  void buildMenus();
  void connectController();
  void connectImageActions(QObject* source);
  bool startJob(const Job& job);
  bool generateFromForm(bool live);
  void saveSettings();
  void applyRestoredForm(const FormState& form, const QStringList& notes, const QString& origin);
  void onModelLoaded(const QString& path, double seconds);
  void onRunStarted(int index, int runs, int devices, int batch);
  void onPreview(int device, int step, const QImage& image);
  void onRunFinished(const RunPtr& run);
  void onJobFinished(JobOutcome outcome);
  void onBusyChanged();
  void refreshProgress();
  // File dialogs (menus and buttons); the slots above do the work.
  void saveGridDialog(const RunPtr& run);
  void saveImageDialog(const RunPtr& run, int index);
  void saveAllDialog();
  void openPngDialog();
  void loadModelDialog();
  // The few-step, LoRA and decoder parts (main_window_fast.cpp).
  void buildFastPanels();
  void restoreFastSettings();
  void saveFastSettings();
  SamplingValues currentSampling() const;
  void setSampling(const SamplingValues& values);
  void adviseSamplingFor(const StableDiffusionModel& model);
  // Greys the negative prompt out (its text kept) while no UNet pass would read it: an
  // LCM-distilled model, or guidance <= 1; the tooltip says why.
  void updateNegativePromptUse();
  void showModelExtras(const StableDiffusionModel& model);
  // Starts merging `loras`; `then` runs once they are in (dropped when merging fails).
  void connectSheet();  // main_window_sheet.cpp
  bool applyLorasThen(const std::vector<LoraSpec>& loras, std::function<void()> then);
  void onLorasApplied(double seconds);
  void onLorasFailed(const QString& message);
  void onTaesdChosen(const QString& path);
  // The LoRA checks and decoder of an imported or reused image; `notes`: what could not be.
  void restoreLorasAndDecoder(const ImageMetadata& metadata, QStringList* notes);
  // The image-to-image part (main_window_init.cpp).
  void buildInitPanel();
  bool runInitSeedComparison();
  void openInitImageDialog();
  void showInitPanel();
  // The init image, mask and their settings of a run's image (reuse), or the settings a PNG
  // recorded (the init image itself is not in PNG metadata); `notes`: what could not be.
  void restoreInitFromRun(const RunRecord& run, int index, QStringList* notes);
  void restoreInitFromPng(const InitImageSettings& settings, QStringList* notes);
  // The ControlNet part (main_window_controlnet.cpp): the panel, its models loaded before a run
  // (`then` runs once they are in), its settings restored from an image's metadata.
  void buildControlNetPanel();
  bool loadControlNetsThen(ComputeDType dtype, std::function<void()> then);
  // The model loaded again for `dtype` (its weights are packed for one dtype), then `then`: runs
  // in the other dtype reload it first. False when the model is already loaded for `dtype`.
  bool reloadModelForDtypeThen(ComputeDType dtype, std::function<void()> then);
  void restoreControlNets(const ImageMetadata& metadata, QStringList* notes);

  AppSettings settings_;
  size_t shown_load_notes_ = 0;  // the loaded model's load_notes() already shown
  GenerationController* controller_;
  ErrorBanner* banner_;
  ModelChooser* model_chooser_;
  PromptPanel* prompts_;
  SettingsPanel* settings_panel_;
  ProgressPanel* progress_;
  QPushButton *generate_, *cancel_;
  QCheckBox* live_box_ = nullptr;
  LiveMode* live_ = nullptr;
  QTabWidget* tabs_;
  ResultGridView* grid_;
  SeedComparisonView* comparison_;
  ComparisonSheetView* sheet_;
  TimingsPanel* timings_;
  FewStepPanel* few_step_ = nullptr;
  LoraPanel* lora_panel_ = nullptr;
  DecoderPanel* decoder_panel_ = nullptr;
  InitImagePanel* init_panel_ = nullptr;
  ControlNetPanel* controlnet_panel_ = nullptr;
  QTimer lora_apply_timer_;           // a LoRA check or strength changed: merge after a pause
  std::function<void()> pending_run_;  // what waits for the LoRAs being merged or the model reloaded
  QString model_path_;  // the path the current model was loaded from (as given to loadModel)
  bool embedded_guidance_ = false;  // the loaded model's UNet takes the guidance as an input (LCM)
  bool retrying_after_merge_ = false;  // pending_run_ is running: the LoRAs were just merged
  std::vector<LoraSpec> merged_loras_;  // what the last merge asked for
  QTimer progress_timer_;
  Job job_;
  RunPtr last_run_;
};

}  // namespace octodiff::gui
