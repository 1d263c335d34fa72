// AppSettings: what the app remembers between sessions, in QSettings ("Octodiff"/"Octodiff").
// Tests redirect QSettings to a temporary folder (QSettings::setPath) before creating windows.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QStringList>

#include "few_step.h"
#include "pipeline/generation.h"

namespace octodiff::gui {

// Everything the form on the left of the main window edits.
struct FormState {
  QStringList prompts;  // the eight prompt fields, as typed (empty ones included)
  QString negative_prompt;
  GenerationRequest request;  // seed, steps, guidance, scheduler, size, advanced (prompts unused)
  bool seed_locked = true;    // unlocked: a new random seed for every Generate
  bool preview = true;
};

class AppSettings {
 public:
  AppSettings();

  FormState form() const;
  void setForm(const FormState& form);

  QString modelPath() const;
  QString tokenizerDir() const;
  void setModel(const QString& path, const QString& tokenizerDir);
  QStringList recentModels() const;  // newest first, at most kMaxRecent
  void addRecentModel(const QString& path);

  // The LoRA folder and its checked files ("name=strength"), the TAESD path and decoder choice.
  QString loraFolder() const;
  void setLoraFolder(const QString& folder);
  QStringList loraSelection() const;
  void setLoraSelection(const QStringList& items);
  QString taesdPath() const;
  void setTaesdPath(const QString& path);
  Decoder decoder() const;
  void setDecoder(Decoder decoder);
  // Steps, guidance and scheduler as the app last set them for a loaded model (few_step.h).
  std::optional<SamplingValues> automaticSampling() const;
  void setAutomaticSampling(const SamplingValues& values);

  QString lastFolder() const;  // where the last file dialog ended
  void setLastFolder(const QString& folder);
  QString comparisonSeeds() const;
  void setComparisonSeeds(const QString& seeds);
  QByteArray windowGeometry() const;
  void setWindowGeometry(const QByteArray& geometry);

  void sync() { settings_.sync(); }

  static constexpr int kMaxRecent = 8;

 private:
  QSettings settings_;
};

}  // namespace octodiff::gui
