#include "preprocess/clip_image_processor.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_numbers.h"

namespace octodiff {
namespace {

using json = nlohmann::json;

// "size": 224 or {"shortest_edge": 224}; "crop_size": 224 or {"height": 224, "width": 224}.
void read_sizes(const json& j, ClipImageProcessor& p, const std::string& what) {
  const auto size = [&](const json& v) -> int {
    try {
      return checked_get<int>(v);
    } catch (const json::exception&) {
      fail("'", what, "': image size ", v.dump(), " is out of range");
    }
  };
  if (j.contains("size")) {
    const json& s = j["size"];
    if (s.is_number_integer()) p.shortest_edge = size(s);
    else if (s.is_object() && s.contains("shortest_edge") && s["shortest_edge"].is_number_integer())
      p.shortest_edge = size(s["shortest_edge"]);
    else
      fail("'", what, "': \"size\" must be a number or {\"shortest_edge\": N} (Octodiff implements the "
           "CLIP resize of the shortest side only)");
  }
  if (j.contains("crop_size")) {
    const json& s = j["crop_size"];
    if (s.is_number_integer()) {
      p.crop_height = p.crop_width = size(s);
    } else if (s.is_object() && s.contains("height") && s.contains("width") && s["height"].is_number_integer() &&
               s["width"].is_number_integer()) {
      p.crop_height = size(s["height"]);
      p.crop_width = size(s["width"]);
    } else {
      fail("'", what, "': \"crop_size\" must be a number or {\"height\": H, \"width\": W}");
    }
  }
  for (int v : {p.shortest_edge, p.crop_height, p.crop_width})
    if (v <= 0 || v > kMaxImageSide) fail("'", what, "': image size ", v, " is out of range");
}

void read_statistics(const json& j, const char* key, std::array<float, 3>* out, const std::string& what) {
  if (!j.contains(key)) return;
  const json& v = j[key];
  if (!v.is_array() || v.size() != 3) fail("'", what, "': \"", key, "\" must be a list of 3 numbers");
  for (int c = 0; c < 3; ++c) {
    if (!v[c].is_number()) fail("'", what, "': \"", key, "\" must be a list of 3 numbers");
    try {
      (*out)[c] = checked_get<float>(v[c]);
    } catch (const json::exception&) {
      fail("'", what, "': \"", key, "\" holds ", v[c].dump(), ", beyond a float's range");
    }
  }
}

template <typename T>
void read_value(const json& j, const char* key, T* out, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    *out = checked_get<T>(j[key]);
  } catch (const json::exception&) {
    fail("'", what, "': \"", key, "\" has the wrong type");
  }
}

}  // namespace

ClipImageProcessor ClipImageProcessor::from_json(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("'", what, "' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("'", what, "' is not a JSON object");
  ClipImageProcessor p;
  read_sizes(j, p, what);
  int resample = 3;
  read_value(j, "resample", &resample, what);
  if (resample != 3) fail("'", what, "': resample ", resample, " is not bicubic (3), the only filter implemented");
  read_value(j, "do_resize", &p.do_resize, what);
  read_value(j, "do_center_crop", &p.do_center_crop, what);
  read_value(j, "do_rescale", &p.do_rescale, what);
  read_value(j, "rescale_factor", &p.rescale_factor, what);
  read_value(j, "do_normalize", &p.do_normalize, what);
  read_statistics(j, "image_mean", &p.image_mean, what);
  read_statistics(j, "image_std", &p.image_std, what);
  for (float s : p.image_std)
    if (!(s > 0.0f)) fail("'", what, "': \"image_std\" must be positive");
  return p;
}

Image8 ClipImageProcessor::resize_and_crop(const Image8& image) const {
  Image8 out = image;
  if (do_resize) {
    const bool portrait = image.width <= image.height;
    const int s = portrait ? image.width : image.height, l = portrait ? image.height : image.width;
    const int new_long = static_cast<int>(static_cast<double>(shortest_edge) * l / s);
    out = portrait ? resize_bicubic(image, shortest_edge, new_long) : resize_bicubic(image, new_long, shortest_edge);
  }
  if (!do_center_crop) return out;
  const int top = (out.height - crop_height) / 2, left = (out.width - crop_width) / 2;
  if (top < 0 || left < 0)
    fail("CLIP preprocessing: a ", out.width, "×", out.height, " image is smaller than the ", crop_width, "×",
         crop_height, " crop");
  Image8 crop{crop_width, crop_height, std::vector<uint8_t>(size_t(crop_width) * crop_height * 3)};
  for (int y = 0; y < crop_height; ++y)
    std::memcpy(&crop.rgb[size_t(y) * crop_width * 3], &out.rgb[(size_t(top + y) * out.width + left) * 3],
                size_t(crop_width) * 3);
  return crop;
}

Tensor ClipImageProcessor::operator()(const std::vector<Image8>& images) const {
  if (images.empty()) fail("internal: CLIP preprocessing of no images");
  std::vector<Image8> ready;
  for (const Image8& image : images) ready.push_back(resize_and_crop(image));
  const int h = ready[0].height, w = ready[0].width;
  for (const Image8& r : ready)
    if (r.height != h || r.width != w)
      fail("CLIP preprocessing: images of different sizes (", r.width, "×", r.height, " and ", w, "×", h, ")");
  Tensor out = Tensor::empty({static_cast<int64_t>(ready.size()), h, w, 3});
  float* dst = out.data();
  for (const Image8& r : ready)
    for (size_t i = 0; i < r.rgb.size(); ++i) {
      float v = do_rescale ? static_cast<float>(static_cast<double>(r.rgb[i]) * rescale_factor) : r.rgb[i];
      if (do_normalize) v = (v - image_mean[i % 3]) / image_std[i % 3];
      *dst++ = v;
    }
  return out;
}

}  // namespace octodiff
