#include "settings_panel.h"

#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRandomGenerator>
#include <QVBoxLayout>
#include <climits>

#include "core/device.h"
#include "pipeline/metadata.h"

namespace octodiff::gui {
namespace {

void selectData(QComboBox* box, int value) {
  const int i = box->findData(value);
  box->setCurrentIndex(i < 0 ? 0 : i);
}

QSpinBox* sizeBox(const QString& name) {
  auto* box = new QSpinBox;
  box->setObjectName(name);
  box->setRange(0, 8192);
  box->setSingleStep(8);
  box->setSuffix(QStringLiteral(" px"));
  box->setSpecialValueText(QObject::tr("default"));
  return box;
}

}  // namespace

SettingsPanel::SettingsPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout;
  form->setContentsMargins(0, 0, 0, 0);
  form->setVerticalSpacing(4);

  seed_ = new QSpinBox;
  seed_->setObjectName(QStringLiteral("seed"));
  seed_->setRange(0, INT_MAX);
  seed_->setToolTip(tr("jax.random.PRNGKey(seed), split once per device"));
  auto* dice = new QPushButton(tr("Random"));
  dice->setObjectName(QStringLiteral("randomSeed"));
  dice->setToolTip(tr("Pick a new random seed now"));
  connect(dice, &QPushButton::clicked, this, [this] { randomizeSeed(); });
  lock_ = new QCheckBox(tr("Lock"));
  lock_->setObjectName(QStringLiteral("seedLock"));
  lock_->setChecked(true);
  lock_->setToolTip(tr("Locked: keep this seed. Unlocked: a new random seed for every Generate."));
  auto* seed_row = new QHBoxLayout;
  seed_row->addWidget(seed_, 1);
  seed_row->addWidget(dice);
  seed_row->addWidget(lock_);
  form->addRow(tr("Seed"), seed_row);

  steps_ = new QSpinBox;
  steps_->setObjectName(QStringLiteral("steps"));
  steps_->setRange(1, 1000);
  steps_->setValue(50);
  guidance_ = new QDoubleSpinBox;
  guidance_->setObjectName(QStringLiteral("guidance"));
  guidance_->setRange(0.0, 50.0);
  guidance_->setSingleStep(0.5);
  guidance_->setDecimals(2);
  guidance_->setValue(7.5);
  auto* steps_row = new QHBoxLayout;
  steps_row->addWidget(steps_, 1);
  steps_row->addWidget(new QLabel(tr("Guidance")));
  steps_row->addWidget(guidance_, 1);
  form->addRow(tr("Steps"), steps_row);

  scheduler_ = new QComboBox;
  scheduler_->setObjectName(QStringLiteral("scheduler"));
  scheduler_->addItem(tr("Model's own"), kModelsOwnScheduler);  // named once a model is loaded
  scheduler_->addItem(tr("PNDM (Flax default)"), static_cast<int>(SchedulerKind::Pndm));
  scheduler_->addItem(tr("DDIM"), static_cast<int>(SchedulerKind::Ddim));
  scheduler_->addItem(tr("LMS"), static_cast<int>(SchedulerKind::Lms));
  scheduler_->addItem(tr("LMS Karras"), kKarrasChoice | static_cast<int>(SchedulerKind::Lms));
  scheduler_->addItem(tr("DPM++ 2M"), static_cast<int>(SchedulerKind::DpmSolverPP));
  scheduler_->addItem(tr("DPM++ 2M Karras"), kKarrasChoice | static_cast<int>(SchedulerKind::DpmSolverPP));
  scheduler_->addItem(tr("DPM++ 2M SDE"), static_cast<int>(SchedulerKind::DpmSolverSde));
  scheduler_->addItem(tr("DPM++ 2M SDE Karras"),
                      kKarrasChoice | static_cast<int>(SchedulerKind::DpmSolverSde));
  scheduler_->addItem(tr("Euler"), static_cast<int>(SchedulerKind::Euler));
  scheduler_->addItem(tr("Euler Karras"), kKarrasChoice | static_cast<int>(SchedulerKind::Euler));
  scheduler_->addItem(tr("Euler a"), static_cast<int>(SchedulerKind::EulerAncestral));
  scheduler_->addItem(tr("LCM"), static_cast<int>(SchedulerKind::Lcm));
  form->addRow(tr("Scheduler"), scheduler_);
  form->addRow(tr("Noise"), buildNoiseRow());

  width_ = sizeBox(QStringLiteral("width"));
  height_ = sizeBox(QStringLiteral("height"));
  auto* size_row = new QHBoxLayout;
  size_row->addWidget(width_, 1);
  size_row->addWidget(new QLabel(QStringLiteral("×")));
  size_row->addWidget(height_, 1);
  form->addRow(tr("Size"), size_row);
  form->addRow(tr("Prompts"), buildPromptReading());

  advanced_toggle_ = new QToolButton;
  advanced_toggle_->setObjectName(QStringLiteral("advancedToggle"));
  advanced_toggle_->setText(tr("Advanced: devices, batch, RNG, compatibility, threads"));
  advanced_toggle_->setCheckable(true);
  advanced_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  advanced_toggle_->setArrowType(Qt::RightArrow);
  advanced_toggle_->setAutoRaise(true);
  advanced_ = buildAdvanced();
  advanced_->setVisible(false);
  connect(advanced_toggle_, &QToolButton::toggled, this, &SettingsPanel::setAdvancedVisible);

  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->addLayout(form);
  column->addWidget(advanced_toggle_);
  column->addWidget(advanced_);
}

QWidget* SettingsPanel::buildAdvanced() {
  auto* box = new QWidget;
  auto* form = new QFormLayout(box);
  form->setContentsMargins(16, 0, 0, 0);
  form->setVerticalSpacing(4);

  devices_ = new QSpinBox;
  devices_->setObjectName(QStringLiteral("devices"));
  devices_->setRange(0, 64);
  devices_->setSpecialValueText(tr("auto: one per prompt"));
  devices_->setToolTip(tr("Shards (devices) of the run; each gets its own PRNG key"));
  batch_ = new QSpinBox;
  batch_->setObjectName(QStringLiteral("batchPerDevice"));
  batch_->setRange(1, 16);
  form->addRow(tr("Devices"), devices_);
  form->addRow(tr("Batch per device"), batch_);

  rng_ = new QComboBox;
  rng_->setObjectName(QStringLiteral("rng"));
  rng_->addItem(tr("classic (JAX ≤ 0.4)"), static_cast<int>(jax::RngScheme::Classic));
  rng_->addItem(tr("partitionable (JAX ≥ 0.5)"), static_cast<int>(jax::RngScheme::Partitionable));
  compat_ = new QComboBox;
  compat_->setObjectName(QStringLiteral("compat"));
  compat_->addItem(tr("flax (FlaxStableDiffusionPipeline)"), static_cast<int>(Compat::Flax));
  compat_->addItem(tr("diffusers (PyTorch pipeline)"), static_cast<int>(Compat::Diffusers));
  dtype_ = new QComboBox;
  dtype_->setObjectName(QStringLiteral("dtype"));
  dtype_->addItem(tr("float32"), static_cast<int>(ComputeDType::F32));
  dtype_->addItem(tr("bfloat16"), static_cast<int>(ComputeDType::BF16));
  dtype_->setToolTip(tr("bfloat16 halves the UNet's and VAE's weight memory and, on CPUs with AVX-512 BF16, "
                        "nearly halves their time (where bf16 products are no faster than float32's, the VAE "
                        "stays float32: it decodes faster that way). Images stay within 1 % of float32's; the "
                        "first step takes about twice as long as the others, because it keeps more precision. "
                        "The weights are packed for one dtype: the next run after a change loads the model again."));
  threads_ = new QSpinBox;
  threads_->setObjectName(QStringLiteral("threads"));
  threads_->setRange(0, 1024);
  threads_->setSpecialValueText(tr("all (%1)").arg(hardware_threads()));
  form->addRow(tr("RNG scheme"), rng_);
  form->addRow(tr("Compatibility"), compat_);
  form->addRow(tr("Compute dtype"), dtype_);
  form->addRow(tr("Threads"), threads_);
  form->addRow(tr("Embeddings"), buildEmbeddingsRow());
  clip_skip_ = new QSpinBox;
  clip_skip_->setObjectName(QStringLiteral("clipSkip"));
  clip_skip_->setRange(1, 24);  // the run checks it against the model's text encoder
  clip_skip_->setToolTip(
      tr("Clip skip (A1111's): the prompts' embeddings from the text encoder's N-th last layer. "
         "1: the last (every pipeline's default); 2: the one before, for models trained on "
         "NovelAI's (most anime models). SDXL keeps its own layers."));
  form->addRow(tr("Clip skip"), clip_skip_);
  form->addRow(tr("SDXL size"), buildSdxlSizeRow());
  return box;
}

QLayout* SettingsPanel::buildNoiseRow() {
  noise_schedule_ = new QComboBox;
  noise_schedule_->setObjectName(QStringLiteral("noiseSchedule"));
  noise_schedule_->addItem(tr("Model's own"), -1);  // named once a model is loaded
  noise_schedule_->addItem(tr("Default"), 0);
  noise_schedule_->addItem(tr("Zero terminal SNR"), 1);
  noise_schedule_->setToolTip(
      tr("Zero terminal SNR: the last timestep is pure noise, for models trained that way (usually with "
         "v-prediction and trailing timesteps; their scheduler configuration says so). DDIM, Euler, Euler a, "
         "DPM++ 2M (SDE) and LCM have it."));
  guidance_rescale_ = new QDoubleSpinBox;
  guidance_rescale_->setObjectName(QStringLiteral("guidanceRescale"));
  guidance_rescale_->setRange(0.0, 1.0);
  guidance_rescale_->setSingleStep(0.05);
  guidance_rescale_->setDecimals(2);
  guidance_rescale_->setSpecialValueText(tr("off"));
  guidance_rescale_->setToolTip(
      tr("CFG rescale φ (diffusers' guidance_rescale): brings the guided prediction back toward the prompt's "
         "own spread, against the washed-out, over-bright images of high guidance. 0.7 for zero-SNR "
         "models; needs guidance above 1."));
  auto* row = new QHBoxLayout;
  row->addWidget(noise_schedule_, 1);
  row->addWidget(new QLabel(tr("CFG rescale")));
  row->addWidget(guidance_rescale_, 1);
  return row;
}

QLayout* SettingsPanel::buildPromptReading() {
  prompt_syntax_ = new QComboBox;
  prompt_syntax_->setObjectName(QStringLiteral("promptSyntax"));
  prompt_syntax_->addItem(tr("A1111 syntax"), static_cast<int>(PromptSyntax::A1111));
  prompt_syntax_->addItem(tr("plain text"), static_cast<int>(PromptSyntax::Plain));
  prompt_syntax_->setToolTip(tr("A1111 syntax: (word) ×1.1, ((word)) ×1.21, (word:1.3), [word] ÷1.1, \\( \\) for "
                                "brackets, BREAK starts a new chunk. Plain text: the Flax pipeline's reading."));
  long_prompts_ = new QComboBox;
  long_prompts_->setObjectName(QStringLiteral("longPrompts"));
  long_prompts_->addItem(tr("all tokens (chunks of 75)"), static_cast<int>(LongPrompts::Chunk));
  long_prompts_->addItem(tr("first 75 tokens"), static_cast<int>(LongPrompts::Truncate));
  long_prompts_->setToolTip(tr("Prompts longer than 75 tokens: encoded in 75-token chunks (A1111, ComfyUI), "
                               "or cut after the first 75 with a warning (the Flax pipeline)."));
  auto* row = new QHBoxLayout;
  row->addWidget(prompt_syntax_, 1);
  row->addWidget(long_prompts_, 1);
  return row;
}

QLayout* SettingsPanel::buildEmbeddingsRow() {
  embeddings_ = new QLineEdit;
  embeddings_->setObjectName(QStringLiteral("embeddingsFolder"));
  embeddings_->setPlaceholderText(tr("none"));
  embeddings_->setToolTip(tr("Folder of textual-inversion embeddings (.safetensors); a prompt calls one by its "
                             "file name"));
  auto* browse = new QPushButton(tr("…"));
  browse->setObjectName(QStringLiteral("browseEmbeddings"));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Embeddings folder"), embeddings_->text());
    if (!dir.isEmpty()) embeddings_->setText(dir);
  });
  auto* row = new QHBoxLayout;
  row->addWidget(embeddings_, 1);
  row->addWidget(browse);
  return row;
}

QLayout* SettingsPanel::buildSdxlSizeRow() {
  sdxl_size_label_ = new QLabel;
  sdxl_size_label_->setObjectName(QStringLiteral("sdxlSize"));
  sdxl_size_label_->setToolTip(tr("diffusers' SDXL size conditioning (original size, crop, target size; "
                                  "Compatibility: diffusers), kept from a reopened image"));
  auto* clear = new QPushButton(tr("Clear"));
  clear->setObjectName(QStringLiteral("clearSdxlSize"));
  connect(clear, &QPushButton::clicked, this, &SettingsPanel::clearSdxlSize);
  auto* row = new QHBoxLayout;
  row->addWidget(sdxl_size_label_, 1);
  row->addWidget(clear);
  clearSdxlSize();
  return row;
}

void SettingsPanel::clearSdxlSize() {
  sdxl_size_ = {};
  sdxl_size_label_->setText(tr("the image size (default)"));
}

void SettingsPanel::applyTo(GenerationRequest* r) const {
  r->seed = seed_->value();
  r->steps = steps_->value();
  r->guidance_scale = guidance_->value();
  applySchedulerChoice(scheduler_->currentData().toInt(), r);
  const int noise = noise_schedule_->currentData().toInt();
  r->zero_snr = noise < 0 ? std::nullopt : std::optional<bool>(noise == 1);
  r->guidance_rescale = guidance_rescale_->value();
  r->width = width_->value();
  r->height = height_->value();
  r->devices = devices_->value();
  r->batch_per_device = batch_->value();
  r->rng = static_cast<jax::RngScheme>(rng_->currentData().toInt());
  r->compat = static_cast<Compat>(compat_->currentData().toInt());
  r->dtype = dtype();
  r->threads = threads_->value();
  r->prompt_syntax = static_cast<PromptSyntax>(prompt_syntax_->currentData().toInt());
  r->long_prompts = static_cast<LongPrompts>(long_prompts_->currentData().toInt());
  r->clip_skip = clip_skip_->value();
  r->embeddings_dir = embeddings_->text().trimmed().toStdString();
  r->sdxl_size = sdxl_size_;
}

void SettingsPanel::setModelScheduler(SchedulerKind kind, bool karras_sigmas) {
  const QString name =
      QString::fromStdString(sampler_display_name(kind)) + (karras_sigmas ? tr(" Karras") : QString());
  scheduler_->setItemText(0, tr("Model's own (%1)").arg(name));
}

void SettingsPanel::setModelNoiseSchedule(bool zeroSnr) {
  noise_schedule_->setItemText(0,
                               tr("Model's own (%1)").arg(zeroSnr ? tr("zero terminal SNR") : tr("default")));
}

void SettingsPanel::setFrom(const GenerationRequest& r) {
  setSeed(r.seed);
  steps_->setValue(r.steps);
  guidance_->setValue(r.guidance_scale);
  selectData(scheduler_, schedulerChoice(r));
  selectData(noise_schedule_, r.zero_snr ? int{*r.zero_snr} : -1);
  guidance_rescale_->setValue(r.guidance_rescale);
  width_->setValue(r.width);
  height_->setValue(r.height);
  devices_->setValue(r.devices);
  batch_->setValue(r.batch_per_device);
  selectData(rng_, static_cast<int>(r.rng));
  selectData(compat_, static_cast<int>(r.compat));
  selectData(dtype_, static_cast<int>(r.dtype));
  threads_->setValue(r.threads);
  selectData(prompt_syntax_, static_cast<int>(r.prompt_syntax));
  selectData(long_prompts_, static_cast<int>(r.long_prompts));
  clip_skip_->setValue(r.clip_skip);
  if (!r.embeddings_dir.empty()) embeddings_->setText(QString::fromStdString(r.embeddings_dir));
  clearSdxlSize();
  if (!r.sdxl_size.given()) return;
  sdxl_size_ = r.sdxl_size;
  const SdxlSizeConditioning& z = r.sdxl_size;
  auto size = [this](int w, int h) { return w || h ? QStringLiteral("%1×%2").arg(w).arg(h) : tr("image size"); };
  sdxl_size_label_->setText(tr("original %1, crop %2,%3, target %4")
                                .arg(size(z.original_width, z.original_height))
                                .arg(z.crop_top)
                                .arg(z.crop_left)
                                .arg(size(z.target_width, z.target_height)));
}

void SettingsPanel::setSeed(int64_t seed) {
  // JAX (x64 off) keeps the low 32 bits of the seed; the box holds 0 .. 2^31 - 1.
  seed_->setValue(static_cast<int>(std::clamp<int64_t>(seed, 0, INT_MAX)));
}

int64_t SettingsPanel::randomizeSeed() {
  const int64_t s = QRandomGenerator::global()->bounded(INT_MAX);
  seed_->setValue(static_cast<int>(s));
  return s;
}

void SettingsPanel::setModelSize(int w, int h, int multiple) {
  width_->setSpecialValueText(tr("default (%1)").arg(w));
  height_->setSpecialValueText(tr("default (%1)").arg(h));
  width_->setSingleStep(std::max(1, multiple));
  height_->setSingleStep(std::max(1, multiple));
}

bool SettingsPanel::advancedVisible() const {
  return advanced_toggle_->isChecked();
}

void SettingsPanel::setAdvancedVisible(bool visible) {
  advanced_toggle_->setChecked(visible);
  advanced_toggle_->setArrowType(visible ? Qt::DownArrow : Qt::RightArrow);
  advanced_->setVisible(visible);
}

ComputeDType SettingsPanel::dtype() const { return static_cast<ComputeDType>(dtype_->currentData().toInt()); }

}  // namespace octodiff::gui
