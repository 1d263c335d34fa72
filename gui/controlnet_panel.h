// ControlNetPanel: the ControlNet part of the form — any number of ControlNets
// (ControlNetUnitEditor each: model, control image and its preprocessed thumbnail, preprocessor,
// scale, start/end), summed by the pipeline as torch's MultiControlNetModel. The models load off
// the UI thread (ControlNetLoader) as soon as a path is set, for the form's dtype; a run waits for
// them (loadThen). applyTo() writes the enabled units into a GenerationRequest as octodiff-cli's
// --controlnet/--control-image/--control-preprocess do, so the PNG metadata is the CLI's; restore()
// sets the units back from an image's metadata (the control images are not in it).
#pragma once

#include <QPushButton>
#include <QVBoxLayout>
#include <QWidget>
#include <functional>
#include <vector>

#include "controlnet_loader.h"
#include "controlnet_unit_editor.h"
#include "pipeline/generation.h"
#include "pipeline/metadata.h"

namespace octodiff::gui {

class ControlNetPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ControlNetPanel(QWidget* parent = nullptr);

  static constexpr int kMaxUnits = 4;
  static constexpr int kMaxRecent = 12;

  int unitCount() const { return static_cast<int>(units_.size()); }
  ControlNetUnitEditor* unit(int i) const { return units_.at(i); }
  ControlNetUnitEditor* addUnit();  // null when kMaxUnits are there
  void removeUnit(int i);
  void clear();
  ControlNetLoader* loader() const { return loader_; }
  QPushButton* addButton() const { return add_; }

  // The form's compute dtype: the units' models are loaded for it ahead of a run.
  void setDType(ComputeDType dtype);
  ComputeDType dtype() const { return dtype_; }

  // The enabled units as request->controlnets (request->dtype set): each with its model when
  // loaded for that dtype (null while not yet: see modelsLoaded, loadThen), its preprocessed
  // image, name, scale, start, end and preprocessor. False and `error` (naming the unit) for an
  // enabled unit without a model path or image, whose model failed to load, or whose
  // preprocessing failed; units with neither path nor image are skipped.
  bool applyTo(GenerationRequest* request, QString* error) const;
  static bool modelsLoaded(const GenerationRequest& request);
  // Loads the enabled units' models for `dtype`, then calls `then` on the UI thread; when one
  // fails, errorOccurred instead. Replaces a `then` still waiting.
  void loadThen(ComputeDType dtype, std::function<void()> then);

  // The units of an image's metadata: one per ControlNet (paths found by name among the units'
  // and the recently loaded ones; images kept where a unit had one), later units switched off.
  // `notes`: what could not be restored (a model not found, the control images).
  void restore(const std::vector<ImageMetadata::ControlNet>& controlnets, QStringList* notes);
  // ControlNets loaded successfully, most recent first (QSettings "controlnet/recent").
  QStringList recentPaths() const;

 signals:
  void changed();
  void errorOccurred(const QString& message);

 private:
  void onLoaded(const QString& path);
  void onFailed(const QString& path, const QString& message);
  void onIdle();
  void refreshStatus(ControlNetUnitEditor* unit);
  void renumber();
  void rememberRecent(const QString& path);
  QStringList wantedPaths() const;
  QString findByName(const QString& name) const;

  ControlNetLoader* loader_;
  QVBoxLayout* list_;
  QPushButton* add_;
  std::vector<ControlNetUnitEditor*> units_;
  ComputeDType dtype_ = ComputeDType::F32;
  std::function<void()> waiting_;  // loadThen's continuation
  ComputeDType waiting_dtype_ = ComputeDType::F32;
};

}  // namespace octodiff::gui
