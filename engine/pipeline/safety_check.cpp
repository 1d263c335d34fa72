#include "pipeline/safety_check.h"

#include "core/error.h"
#include "io/files.h"
#include "models/layers.h"
#include "pipeline/component_weights.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

ClipImageProcessor read_processor(const fs::path& model_dir, const ClipVisionConfig& vision) {
  const fs::path config = model_dir / "feature_extractor" / "preprocessor_config.json";
  if (fs::exists(config)) return ClipImageProcessor::from_json(read_text_file(config), config.string());
  ClipImageProcessor p;
  p.shortest_edge = p.crop_height = p.crop_width = vision.image_size;
  return p;
}

bool has_readable_weights(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" || e.path().filename() == "flax_model.msgpack") return true;
  return false;
}

}  // namespace

std::shared_ptr<const SafetyCheckerComponent> load_safety_checker(const fs::path& model_dir, bool prefer_flax,
                                                                  std::string* note) {
  const fs::path dir = model_dir / "safety_checker";
  if (!fs::is_directory(dir)) return nullptr;
  if (!has_readable_weights(dir)) {
    *note = cat("the safety checker is not run: '", dir.string(), "' holds no model.safetensors or "
                "flax_model.msgpack (Octodiff does not read pickled .bin files)");
    return nullptr;
  }
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) fail("model folder is incomplete: '", config_path.string(), "' is missing");
  const SafetyCheckerConfig config = SafetyCheckerConfig::from_json(read_text_file(config_path), config_path.string());
  ComponentWeights weights = open_component_weights(dir, "model", "flax_model.msgpack", FlaxNaming::Transformers,
                                                    /*variant=*/"", prefer_flax);
  auto component = std::make_shared<SafetyCheckerComponent>();
  component->checker = SafetyChecker::load(*weights.source, config);
  release_packing_scratch();
  component->processor = read_processor(model_dir, config.vision);
  if (component->processor.crop_height != config.vision.image_size ||
      component->processor.crop_width != config.vision.image_size)
    fail("'", (model_dir / "feature_extractor").string(), "' crops images to ", component->processor.crop_width, "×",
         component->processor.crop_height, " but the safety checker takes ", config.vision.image_size, "×",
         config.vision.image_size);
  component->files = weights.files;
  component->format = weights.flax_dtype ? flax_format_description(*weights.flax_dtype) : "safetensors";
  return component;
}

SafetyScores check_image_safety(const SafetyCheckerComponent& c, const Tensor& images) {
  if (images.rank() != 4 || images.dim(3) != 3)
    fail("internal: safety check of images shaped ", shape_str(images.shape()), ", expected B × H × W × 3");
  const int64_t B = images.dim(0), H = images.dim(1), W = images.dim(2);
  std::vector<Image8> u8;
  for (int64_t b = 0; b < B; ++b)
    u8.push_back(to_uint8(images.data() + b * H * W * 3, static_cast<int>(H), static_cast<int>(W)));
  return c.checker.check(c.processor(u8));
}

}  // namespace octodiff
