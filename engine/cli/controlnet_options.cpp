#include "controlnet_options.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/controlnet.h"
#include "preprocess/canny.h"

namespace octodiff::cli {
namespace fs = std::filesystem;

const char* kControlNetUsage =
    "  --controlnet PATH[:SCALE] a ControlNet (diffusers folder or original control_*.safetensors),\n"
    "                            conditioning scale default 1 (repeat for several: their residuals add);\n"
    "                            on an SDXL model an SDXL ControlNet's diffusers folder\n"
    "  --control-image FILE.png  the control image of each --controlnet, in order (resized to the\n"
    "                            image size; it sets the size when --height/--width are not given:\n"
    "                            sides floored to a multiple of 64 (flax) or 8 (diffusers))\n"
    "  --control-preprocess canny|none  make the control images with OpenCV's Canny (100, 200) or\n"
    "                            use them as they are (default none)\n"
    "  --control-start F --control-end F  the fraction of the steps each ControlNet acts in (default 0, 1)\n";

namespace {

// "PATH:SCALE" when what follows the last ':' is a number, else PATH with scale 1.
std::pair<fs::path, double> path_and_scale(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon + 1 < text.size()) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double scale = std::strtod(tail.c_str(), &end);
    if (end && *end == '\0') return {text.substr(0, colon), scale};
  }
  return {text, 1.0};
}

Image8 read_control_image(const std::string& path) {
  try {
    return read_png(path);
  } catch (const Error& e) {
    fail("--control-image '", path, "' cannot be read: ", e.what());
  }
}

}  // namespace

void controlnet_options(const Args& args, GenerationRequest& req) {
  const auto nets = args.all("controlnet");
  const auto images = args.all("control-image");
  const bool other = args.get("control-preprocess") || args.get("control-start") || args.get("control-end");
  if (nets.empty()) {
    if (!images.empty() || other) fail("--control-image, --control-preprocess, --control-start and --control-end need --controlnet");
    return;
  }
  if (images.size() != nets.size())
    fail(nets.size(), " --controlnet but ", images.size(), " --control-image (give one image per ControlNet, in order)");
  const ControlPreprocessor pre = parse_control_preprocessor(args.get_or("control-preprocess", "none"));
  for (size_t k = 0; k < nets.size(); ++k) {
    const auto [path, scale] = path_and_scale(nets[k]);
    ControlNetUse use;
    use.model = load_controlnet(path, req.dtype);
    use.name = fs::is_directory(path) ? (path.filename().empty() ? path.parent_path() : path).filename().string()
                                      : path.stem().string();
    use.scale = scale;
    use.guidance_start = args.get_double("control-start", 0.0);
    use.guidance_end = args.get_double("control-end", 1.0);
    use.images = {preprocess_control_image(read_control_image(images[k]), pre)};
    use.preprocessor = control_preprocessor_name(pre);
    req.controlnets.push_back(std::move(use));
  }
}

}  // namespace octodiff::cli
