#include "pipeline/component_weights.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "pipeline/model.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

bool has_safetensors(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

DType dominant_dtype(const WeightSource& w) {
  std::map<DType, int64_t> elements;
  for (const std::string& name : w.names()) elements[w.stored_dtype(name)] += shape_numel(w.shape_of(name));
  auto most = std::max_element(elements.begin(), elements.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return most == elements.end() ? DType::F32 : most->first;
}

}  // namespace

ComponentWeights open_component_weights(const fs::path& dir, const std::string& safetensors_base,
                                        const std::string& flax_name, FlaxNaming naming,
                                        const std::string& variant, bool prefer_flax) {
  ComponentWeights out;
  const fs::path flax = dir / flax_name;
  if (fs::is_regular_file(flax) && (prefer_flax || !has_safetensors(dir))) {
    out.files = {flax};
    out.source = weights_from_flax_msgpack(flax, naming, cat("'", flax.string(), "'"));
    out.flax_dtype = dominant_dtype(*out.source);
    return out;
  }
  out.files = component_weight_files(dir, safetensors_base, variant);
  const std::string description = out.files.size() == 1 ? cat("'", out.files[0].string(), "'")
                                                         : cat("'", dir.string(), "' (", out.files.size(), " shards)");
  out.source = weights_from_safetensors(out.files, description);
  return out;
}

std::string flax_format_description(DType dtype) {
  std::string name = dtype_name(dtype);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return "Flax msgpack (" + name + ")";
}

}  // namespace octodiff
