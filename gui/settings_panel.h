// SettingsPanel: the sampling settings (seed with random/lock, steps, guidance, scheduler, noise
// schedule and guidance rescale, size,
// how prompts are read: syntax and long prompts) and, folded away under "Advanced", the sharding
// and numerics (devices, batch per device, RNG scheme, compatibility, dtype, threads), the
// textual-inversion embeddings folder and the SDXL size conditioning of a reopened image.
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QToolButton>
#include <QWidget>

#include "pipeline/generation.h"
#include "scheduler_choice.h"

namespace octodiff::gui {

class SettingsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SettingsPanel(QWidget* parent = nullptr);

  // Writes every setting of this panel into `request` (prompts untouched).
  void applyTo(GenerationRequest* request) const;
  // Shows `request`'s settings (prompts ignored; an empty embeddings folder, as in requests read
  // from an image's metadata, keeps the folder shown).
  void setFrom(const GenerationRequest& request);

  int64_t seed() const { return seed_->value(); }
  void setSeed(int64_t seed);
  bool seedLocked() const { return lock_->isChecked(); }
  void setSeedLocked(bool locked) { lock_->setChecked(locked); }
  // Picks a new random seed (as octodiff-cli's --seed random does) and shows it.
  int64_t randomizeSeed();
  // Names the model's own scheduler in the scheduler box's first entry ("Model's own (Euler)",
  // "Model's own (DPM++ 2M Karras)").
  void setModelScheduler(SchedulerKind kind, bool karras_sigmas = false);
  // Names the model's own noise schedule in the noise box's first entry ("Model's own (zero
  // terminal SNR)", "Model's own (default)").
  void setModelNoiseSchedule(bool zeroSnr);
  // The scheduler box's item data of that first entry (the others hold a scheduler_choice.h choice:
  // a SchedulerKind, or one with kKarrasChoice).
  static constexpr int kModelsOwnScheduler = kModelsOwnSchedulerChoice;
  // The size the model makes by default, and the multiple sizes must be of.
  void setModelSize(int defaultWidth, int defaultHeight, int multiple);
  bool advancedVisible() const;
  void setAdvancedVisible(bool visible);

  QSpinBox* seedBox() const { return seed_; }
  QCheckBox* lockBox() const { return lock_; }
  QSpinBox* stepsBox() const { return steps_; }
  QDoubleSpinBox* guidanceBox() const { return guidance_; }
  QComboBox* schedulerBox() const { return scheduler_; }
  // GenerationRequest::zero_snr: item data -1 the model's own, 0 default, 1 zero terminal SNR.
  QComboBox* noiseScheduleBox() const { return noise_schedule_; }
  QDoubleSpinBox* guidanceRescaleBox() const { return guidance_rescale_; }
  QSpinBox* widthBox() const { return width_; }
  QSpinBox* heightBox() const { return height_; }
  QSpinBox* devicesBox() const { return devices_; }
  QSpinBox* batchBox() const { return batch_; }
  QComboBox* rngBox() const { return rng_; }
  QComboBox* compatBox() const { return compat_; }
  QComboBox* dtypeBox() const { return dtype_; }
  // The dtype chosen in the form (the model is loaded for it before a run).
  ComputeDType dtype() const;
  QSpinBox* threadsBox() const { return threads_; }
  QComboBox* promptSyntaxBox() const { return prompt_syntax_; }
  QComboBox* longPromptsBox() const { return long_prompts_; }
  QSpinBox* clipSkipBox() const { return clip_skip_; }
  QLineEdit* embeddingsEdit() const { return embeddings_; }
  // SDXL's original size / crop / target size (GenerationRequest::sdxl_size, --compat diffusers):
  // no fields of its own; kept from a reopened image's settings (setFrom), shown, and cleared by
  // the row's Clear button.
  QLabel* sdxlSizeLabel() const { return sdxl_size_label_; }
  void clearSdxlSize();

 private:
  QWidget* buildAdvanced();
  QLayout* buildPromptReading();
  QLayout* buildEmbeddingsRow();
  QLayout* buildSdxlSizeRow();
  QLayout* buildNoiseRow();

  QSpinBox* seed_ = nullptr;
  QCheckBox* lock_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QDoubleSpinBox* guidance_ = nullptr;
  QComboBox* noise_schedule_ = nullptr;
  QDoubleSpinBox* guidance_rescale_ = nullptr;
  QComboBox* scheduler_ = nullptr;
  QSpinBox *width_ = nullptr, *height_ = nullptr;
  QToolButton* advanced_toggle_ = nullptr;
  QWidget* advanced_ = nullptr;
  QSpinBox *devices_ = nullptr, *batch_ = nullptr, *threads_ = nullptr;
  QComboBox *rng_ = nullptr, *compat_ = nullptr, *dtype_ = nullptr;
  QComboBox *prompt_syntax_ = nullptr, *long_prompts_ = nullptr;
  QSpinBox* clip_skip_ = nullptr;
  QLineEdit* embeddings_ = nullptr;
  SdxlSizeConditioning sdxl_size_;
  QLabel* sdxl_size_label_ = nullptr;
};

}  // namespace octodiff::gui
