// The Flax pipeline's safety checker stage (spec/pipeline.md §7, flax-family.md §4): loaded when
// the model folder has safety_checker/ (FlaxStableDiffusionPipeline.from_pretrained does the
// same), run on every decoded image unless the request turns it off.
//
// Per image, as `_run_safety_checker`: the float image → uint8 as numpy_to_pil
// (`(images * 255).round().astype(uint8)`, io/image.h to_uint8) → CLIPImageProcessor
// (preprocess/clip_image_processor.h) → SafetyChecker (models/safety_checker.h). Each device
// checks its own B images, as the pmapped checker does on its shard.
//
// Unlike the Flax pipeline, a flagged image is NOT replaced by a black one: the result keeps the
// image and says it was flagged (GenerationResult::nsfw_flagged), and the CLI, the PNG metadata
// and the app show it. (The Flax pipeline also writes the black image into images[i, 0], correct
// only for one image per device — spec/pipeline.md §7 step 4; that question does not arise here.)
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/safety_checker.h"
#include "preprocess/clip_image_processor.h"

namespace octodiff {

struct SafetyCheckerComponent {
  SafetyChecker checker;
  ClipImageProcessor processor;                 // feature_extractor/preprocessor_config.json
  std::vector<std::filesystem::path> files;     // the weights read
  std::string format;                           // "safetensors" or "Flax msgpack (bf16)" …
};

// <model>/safety_checker (config.json + model.safetensors or flax_model.msgpack, as the other
// components: a folder with both reads the safetensors unless `prefer_flax`) with
// <model>/feature_extractor/preprocessor_config.json (CLIPImageProcessor's defaults at the
// checker's image size when that file is absent). nullptr when the folder has no safety_checker/,
// or (with *note saying so) when it holds no weights Octodiff reads (only pytorch_model.bin);
// unreadable or mismatched weights are errors naming the file and the tensor.
// The checker runs in float32 whatever the pipeline's dtype (the Flax checker's vision tower is
// built in float32) and lives on the heap (ViT-L/14: ~1.2 GB), not in the weight cache.
std::shared_ptr<const SafetyCheckerComponent> load_safety_checker(const std::filesystem::path& model_dir,
                                                                  bool prefer_flax, std::string* note);

// Images: B × H × W × 3 float32 in [0, 1] (one device's decoded images). The checker's scores.
SafetyScores check_image_safety(const SafetyCheckerComponent& checker, const Tensor& images);

}  // namespace octodiff
