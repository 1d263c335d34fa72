// Requests that reproduce a tiny model's diffusers goldens: the prompts of its goldens/prompts.json
// (written by the script that made the model: tools/goldens/make_tiny_sd*.py, make_tiny_sdxl.py)
// and the image-to-image init images beside them (make_img2img_goldens.py,
// make_sdxl_img2img_goldens.py).
// Header-only: the pipeline tests that use it link the pipeline; the support library does not.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/png.h"
#include "pipeline/generation.h"

namespace octodiff::test {

// model_dir/goldens/prompts.json.
inline nlohmann::json golden_settings(const std::filesystem::path& model_dir) {
  return nlohmann::json::parse(read_text_file(model_dir / "goldens" / "prompts.json"));
}

// A request with the goldens' "pipeline_prompts" (one per device) and "pipeline_negative_prompt",
// under --compat diffusers (the goldens are diffusers' runs); everything else at its default.
inline GenerationRequest golden_prompts_request(const nlohmann::json& settings) {
  GenerationRequest req;
  for (const auto& p : settings["pipeline_prompts"]) req.prompts.push_back(p.get<std::string>());
  req.negative_prompts = {settings["pipeline_negative_prompt"].get<std::string>()};
  req.compat = Compat::Diffusers;
  return req;
}

// model_dir/goldens/img2img_init_0.png and img2img_init_1.png: one init image per device.
inline std::vector<Image8> golden_init_images(const std::filesystem::path& model_dir) {
  const std::filesystem::path dir = model_dir / "goldens";
  return {read_png(dir / "img2img_init_0.png"), read_png(dir / "img2img_init_1.png")};
}

}  // namespace octodiff::test
