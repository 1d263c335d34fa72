// AppSettings: what the app remembers between sessions, in QSettings ("Octodiff"/"Octodiff").
// Tests redirect QSettings to a temporary folder (QSettings::setPath) before creating windows.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QStringList>

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
