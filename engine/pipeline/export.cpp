#include "pipeline/export.h"

#include "core/error.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "pipeline/model.h"

namespace octodiff {
namespace fs = std::filesystem;

std::vector<Image8> result_images(const GenerationResult& result) {
  const Tensor& im = result.images;  // (D, B, H, W, 3)
  const int D = static_cast<int>(im.dim(0)), B = static_cast<int>(im.dim(1));
  const int H = static_cast<int>(im.dim(2)), W = static_cast<int>(im.dim(3));
  std::vector<Image8> out;
  for (int i = 0; i < D * B; ++i) out.push_back(to_uint8(im.data() + int64_t{i} * H * W * 3, H, W));
  return out;
}

Image8 result_grid(const GenerationResult& result) {
  auto images = result_images(result);
  int rows = 1, cols = 1;
  grid_shape(static_cast<int>(images.size()), &rows, &cols);
  return make_grid(images, rows, cols);
}

void save_grid_png(const fs::path& path, const GenerationRequest& request, const GenerationResult& result,
                   const StableDiffusionModel& model, int scale) {
  Image8 grid = result_grid(result);
  if (scale > 1) grid = upscale_nearest(grid, scale);
  write_png(path, grid, png_texts(describe_image(request, result, model, -1, -1)));
}

std::vector<fs::path> save_image_pngs(const fs::path& dir, const GenerationRequest& request,
                                      const GenerationResult& result, const StableDiffusionModel& model,
                                      const std::string& prefix, int scale) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create folder '", dir.string(), "': ", ec.message());
  auto images = result_images(result);
  const int B = result.signature.batch;
  std::vector<fs::path> paths;
  for (size_t i = 0; i < images.size(); ++i) {
    const int d = static_cast<int>(i) / B, b = static_cast<int>(i) % B;
    fs::path p = dir / cat(prefix, "-", request.seed, "-", i + 1, ".png");
    write_png(p, scale > 1 ? upscale_nearest(images[i], scale) : images[i],
              png_texts(describe_image(request, result, model, d, b)));
    paths.push_back(p);
  }
  return paths;
}

}  // namespace octodiff
