// Export and import of PNGs with Octodiff's metadata — exactly what octodiff-cli writes (the
// engine's save_grid_png / png_texts), so files from either restore the same settings.
// Every function throws octodiff::Error with a message for the user (bad file, disk full, …).
#pragma once

#include <QByteArray>
#include <QImage>
#include <QString>
#include <QStringList>
#include <optional>
#include <vector>

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

// The image-to-image and inpainting settings an image was made with (absent: not recorded; a
// text-to-image image has none). The init image and the mask themselves are not in PNG metadata
// (neither Octodiff's nor A1111's): a restored strength applies to the init image in the panel.
struct InitImageSettings {
  std::optional<double> strength;     // A1111 "Denoising strength"
  std::optional<int> mask_blur;       // A1111 "Mask blur"
  std::optional<bool> only_masked;    // A1111 "Inpaint area: Only masked" (absent key: whole picture)
  std::optional<int> masked_padding;  // A1111 "Masked area padding"
  bool imageToImage() const { return strength.has_value(); }
};
// From a PNG's texts: the strength as `metadata` has it (Octodiff's JSON or the A1111 text), the
// inpainting keys from the A1111 "parameters" text.
InitImageSettings initSettingsFromPng(const std::vector<PngText>& texts, const ImageMetadata& metadata);
// From the request of a run made in this session (GenerationRequest's image-to-image fields).
InitImageSettings initSettingsFromRequest(const GenerationRequest& request);

struct ImportedPng {
  ImageMetadata metadata;
  QImage image;
  InitImageSettings init;
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
