// Which model the app starts on: the embedded demo model, or — while that has not been trained
// yet — the tiny random-weight test model, labelled as such.
#pragma once

#include <QString>

namespace octodiff::gui {

// The embedded demo model when its folder holds a model, else the tiny test model (source tree).
QString defaultModelPath();
QString demoModelPath();      // StableDiffusionModel::default_model_path()
QString tinyTestModelPath();  // tests/data/tiny-sd in the source tree (empty when not built from it)
// A short honest name for the UI: "embedded demo model", "tiny random test model (makes noise)",
// or the folder/file name.
QString modelLabel(const QString& path);

}  // namespace octodiff::gui
