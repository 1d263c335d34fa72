// From a GenerationResult to pictures on disk: uint8 conversion (numpy's rounding), the grid
// (2×4 for eight images), PNGs with metadata. Writes are atomic; failures are clear errors.
#pragma once

#include <filesystem>
#include <vector>

#include "io/image.h"
#include "pipeline/generation.h"

namespace octodiff {

class StableDiffusionModel;

// Every image of the result, device-major (D·B images).
std::vector<Image8> result_images(const GenerationResult& result);
Image8 result_grid(const GenerationResult& result);

// `scale` > 1 enlarges the pictures with nearest-neighbour pixels (small models' 64×64 images);
// the metadata still describes the generated size.
void save_grid_png(const std::filesystem::path& path, const GenerationRequest& request,
                   const GenerationResult& result, const StableDiffusionModel& model, int scale = 1);
// Writes <dir>/<prefix>-<seed>-<image number>.png for every image; returns the paths.
std::vector<std::filesystem::path> save_image_pngs(const std::filesystem::path& dir,
                                                   const GenerationRequest& request,
                                                   const GenerationResult& result,
                                                   const StableDiffusionModel& model,
                                                   const std::string& prefix = "octodiff", int scale = 1);

}  // namespace octodiff
