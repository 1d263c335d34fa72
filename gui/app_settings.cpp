#include "app_settings.h"

#include <QDir>
#include <algorithm>

#include "scheduler_choice.h"

namespace octodiff::gui {

AppSettings::AppSettings() : settings_(QStringLiteral("Octodiff"), QStringLiteral("Octodiff")) {}

FormState AppSettings::form() const {
  FormState f;
  const GenerationRequest defaults;
  f.prompts = settings_.value("form/prompts").toStringList();
  while (f.prompts.size() < 8) f.prompts.append(QString());
  f.negative_prompt = settings_.value("form/negative_prompt").toString();
  GenerationRequest& r = f.request;
  r.seed = settings_.value("form/seed", 0).toLongLong();
  r.steps = settings_.value("form/steps", defaults.steps).toInt();
  r.guidance_scale = settings_.value("form/guidance", defaults.guidance_scale).toDouble();
  // -1 (the default): the model's own scheduler; Karras sigmas with it (scheduler_choice.h).
  applySchedulerChoice(settings_.value("form/scheduler", kModelsOwnSchedulerChoice).toInt(), &r);
  // -1 (the default): the model's own noise schedule; 0 default; 1 zero terminal SNR.
  if (const int noise = settings_.value("form/noise_schedule", -1).toInt(); noise >= 0)
    r.zero_snr = noise == 1;
  r.guidance_rescale = std::clamp(settings_.value("form/guidance_rescale", 0.0).toDouble(), 0.0, 1.0);
  r.width = settings_.value("form/width", 0).toInt();
  r.height = settings_.value("form/height", 0).toInt();
  r.devices = settings_.value("form/devices", 0).toInt();
  r.batch_per_device = settings_.value("form/batch_per_device", 1).toInt();
  r.rng = static_cast<jax::RngScheme>(settings_.value("form/rng", 0).toInt());
  r.compat = static_cast<Compat>(settings_.value("form/compat", 0).toInt());
  r.dtype = static_cast<ComputeDType>(settings_.value("form/dtype", 0).toInt());
  r.threads = settings_.value("form/threads", 0).toInt();
  // The app reads prompts as A1111 does by default (the engine and CLI default to plain, truncate).
  r.prompt_syntax = static_cast<PromptSyntax>(
      settings_.value("form/prompt_syntax", static_cast<int>(PromptSyntax::A1111)).toInt());
  r.long_prompts = static_cast<LongPrompts>(
      settings_.value("form/long_prompts", static_cast<int>(LongPrompts::Chunk)).toInt());
  r.clip_skip = settings_.value("form/clip_skip", 1).toInt();
  r.embeddings_dir = settings_.value("form/embeddings_dir").toString().toStdString();
  f.seed_locked = settings_.value("form/seed_locked", true).toBool();
  f.preview = settings_.value("form/preview", true).toBool();
  return f;
}

void AppSettings::setForm(const FormState& f) {
  const GenerationRequest& r = f.request;
  settings_.setValue("form/prompts", f.prompts);
  settings_.setValue("form/negative_prompt", f.negative_prompt);
  settings_.setValue("form/seed", static_cast<qlonglong>(r.seed));
  settings_.setValue("form/steps", r.steps);
  settings_.setValue("form/guidance", r.guidance_scale);
  settings_.setValue("form/scheduler", schedulerChoice(r));
  settings_.setValue("form/noise_schedule", r.zero_snr ? int{*r.zero_snr} : -1);
  settings_.setValue("form/guidance_rescale", r.guidance_rescale);
  settings_.setValue("form/width", r.width);
  settings_.setValue("form/height", r.height);
  settings_.setValue("form/devices", r.devices);
  settings_.setValue("form/batch_per_device", r.batch_per_device);
  settings_.setValue("form/rng", static_cast<int>(r.rng));
  settings_.setValue("form/compat", static_cast<int>(r.compat));
  settings_.setValue("form/dtype", static_cast<int>(r.dtype));
  settings_.setValue("form/threads", r.threads);
  settings_.setValue("form/prompt_syntax", static_cast<int>(r.prompt_syntax));
  settings_.setValue("form/long_prompts", static_cast<int>(r.long_prompts));
  settings_.setValue("form/clip_skip", r.clip_skip);
  settings_.setValue("form/embeddings_dir", QString::fromStdString(r.embeddings_dir));
  settings_.setValue("form/seed_locked", f.seed_locked);
  settings_.setValue("form/preview", f.preview);
}

QString AppSettings::modelPath() const {
  return settings_.value("model/path").toString();
}
QString AppSettings::tokenizerDir() const {
  return settings_.value("model/tokenizer").toString();
}

void AppSettings::setModel(const QString& path, const QString& tokenizerDir) {
  settings_.setValue("model/path", path);
  settings_.setValue("model/tokenizer", tokenizerDir);
}

QStringList AppSettings::recentModels() const {
  return settings_.value("model/recent").toStringList();
}

void AppSettings::addRecentModel(const QString& path) {
  QStringList recent = recentModels();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings_.setValue("model/recent", recent);
}

QString AppSettings::loraFolder() const {
  return settings_.value("lora/folder").toString();
}
void AppSettings::setLoraFolder(const QString& folder) {
  settings_.setValue("lora/folder", folder);
}
QStringList AppSettings::loraSelection() const {
  return settings_.value("lora/selection").toStringList();
}
void AppSettings::setLoraSelection(const QStringList& items) {
  settings_.setValue("lora/selection", items);
}
QString AppSettings::taesdPath() const {
  return settings_.value("decoder/taesd").toString();
}
void AppSettings::setTaesdPath(const QString& path) {
  settings_.setValue("decoder/taesd", path);
}
Decoder AppSettings::decoder() const {
  return settings_.value("decoder/kind").toString() == QStringLiteral("taesd") ? Decoder::Tiny : Decoder::Vae;
}
void AppSettings::setDecoder(Decoder d) {
  settings_.setValue("decoder/kind", QString::fromStdString(decoder_name(d)));
}

std::optional<SamplingValues> AppSettings::automaticSampling() const {
  if (!settings_.contains("form/auto_steps")) return std::nullopt;
  SamplingValues v;
  v.steps = settings_.value("form/auto_steps").toInt();
  v.guidance = settings_.value("form/auto_guidance").toDouble();
  if (const int k = settings_.value("form/auto_scheduler", -1).toInt(); k >= 0) v.scheduler = static_cast<SchedulerKind>(k);
  v.guidance_rescale = settings_.value("form/auto_guidance_rescale", 0.0).toDouble();
  return v;
}
void AppSettings::setAutomaticSampling(const SamplingValues& v) {
  settings_.setValue("form/auto_steps", v.steps);
  settings_.setValue("form/auto_guidance", v.guidance);
  settings_.setValue("form/auto_scheduler", v.scheduler ? static_cast<int>(*v.scheduler) : -1);
  settings_.setValue("form/auto_guidance_rescale", v.guidance_rescale);
}

QString AppSettings::lastFolder() const {
  return settings_.value("ui/last_folder", QDir::homePath()).toString();
}
void AppSettings::setLastFolder(const QString& folder) {
  settings_.setValue("ui/last_folder", folder);
}
QString AppSettings::comparisonSeeds() const {
  return settings_.value("ui/comparison_seeds", QStringLiteral("0, 1, 2, 3")).toString();
}
void AppSettings::setComparisonSeeds(const QString& seeds) {
  settings_.setValue("ui/comparison_seeds", seeds);
}
QByteArray AppSettings::windowGeometry() const {
  return settings_.value("ui/geometry").toByteArray();
}
void AppSettings::setWindowGeometry(const QByteArray& g) {
  settings_.setValue("ui/geometry", g);
}

}  // namespace octodiff::gui
