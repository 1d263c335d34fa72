// Export and import of PNGs with Octodiff's metadata — exactly what octodiff-cli writes (the
// engine's save_grid_png / png_texts), so files from either restore the same settings.
// Every function throws octodiff::Error with a message for the user (bad file, disk full, …).
#pragma once

#include <QByteArray>
#include <QImage>
#include <QString>
#include <QStringList>

#include "app_settings.h"
#include "pipeline/metadata.h"
#include "run_record.h"

namespace octodiff::gui {

void saveGridPng(const QString& path, const RunRecord& run);
void saveImagePng(const QString& path, const RunRecord& run, int index);
// Every image as <dir>/octodiff-<seed>-<n>.png (as octodiff-cli --out-dir); returns the paths.
QStringList saveImagePngs(const QString& dir, const RunRecord& run);
// The PNG bytes of one image with its metadata (clipboard).
QByteArray imagePngBytes(const RunRecord& run, int index);
QString suggestedGridName(const RunRecord& run);
QString suggestedImageName(const RunRecord& run, int index);

struct ImportedPng {
  ImageMetadata metadata;
  QImage image;
};
// Reads a PNG made by Octodiff (or another tool writing A1111 "parameters"); throws when the file
// is not a readable PNG or carries no generation settings.
ImportedPng importPng(const QString& path);

// The form that makes this image (or grid) again. A grid whose prompts fit the eight fields gets
// one prompt per field; a single image gets its prompt once with the original device count, so
// that image reappears at its own position (its device's PRNG key depends on the count).
// `notes` collects what could not be restored exactly.
FormState formFromMetadata(const ImageMetadata& metadata, const FormState& current, QStringList* notes);

}  // namespace octodiff::gui
