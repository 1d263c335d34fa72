#include "models/clip_vision_model.h"

#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "io/json_numbers.h"

namespace octodiff {

namespace {

template <typename T>
void read_field(const nlohmann::json& j, const char* key, T* out, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    *out = checked_get<T>(j[key]);
  } catch (const nlohmann::json::exception&) {
    fail("'", what, "': \"", key, "\" has the wrong type");
  }
}

}  // namespace

ClipVisionConfig ClipVisionConfig::from_json(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'", what, "' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("'", what, "': the vision configuration is not a JSON object");
  ClipVisionConfig c;
  read_field(j, "hidden_size", &c.hidden_size, what);
  read_field(j, "intermediate_size", &c.intermediate_size, what);
  read_field(j, "num_hidden_layers", &c.num_hidden_layers, what);
  read_field(j, "num_attention_heads", &c.num_attention_heads, what);
  read_field(j, "num_channels", &c.num_channels, what);
  read_field(j, "image_size", &c.image_size, what);
  read_field(j, "patch_size", &c.patch_size, what);
  read_field(j, "hidden_act", &c.hidden_act, what);
  read_field(j, "layer_norm_eps", &c.layer_norm_eps, what);
  c.validate(what);
  return c;
}

void ClipVisionConfig::validate(const std::string& what) const {
  for (auto [v, k] : {std::pair{hidden_size, "hidden_size"}, {intermediate_size, "intermediate_size"},
                      {num_hidden_layers, "num_hidden_layers"}, {num_attention_heads, "num_attention_heads"},
                      {num_channels, "num_channels"}, {image_size, "image_size"}, {patch_size, "patch_size"}})
    if (v <= 0 || v > (1 << 16)) fail("'", what, "': vision ", k, " ", v, " is out of range");
  if (hidden_size % num_attention_heads)
    fail("'", what, "': vision hidden_size ", hidden_size, " is not divisible by num_attention_heads ",
         num_attention_heads);
  if (image_size % patch_size)
    fail("'", what, "': vision image_size ", image_size, " is not a multiple of patch_size ", patch_size);
  parse_clip_activation(hidden_act);
}

ClipVisionModel ClipVisionModel::load(WeightSource& w, const std::string& p, const ClipVisionConfig& c) {
  c.validate(w.description());
  ClipVisionModel m;
  m.config_ = c;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.layer_norm_eps);
  const kernels::Conv2dGeometry patches{c.patch_size, 0, 0, 0, 0};
  m.patch_embedding_ = Conv2d::load(w, p + "embeddings.patch_embedding", c.num_channels, H, c.patch_size, patches,
                                    kernels::Precision::F32, /*has_bias=*/false);
  m.class_embedding_ = to_vector(w.take(p + "embeddings.class_embedding", {H}));
  m.position_embedding_ = w.take(p + "embeddings.position_embedding.weight", {c.positions(), H});
  w.ignore(p + "embeddings.position_ids");  // a buffer older files carry; not a weight
  m.pre_layernorm_ = LayerNorm::load(w, p + "pre_layrnorm", H, eps);  // transformers' spelling
  const ClipEncoderLayerShape shape{H, c.intermediate_size, c.num_attention_heads, eps,
                                    parse_clip_activation(c.hidden_act), /*causal=*/false};
  for (int i = 0; i < c.num_hidden_layers; ++i)
    m.layers_.push_back(ClipEncoderLayer::load(w, p + "encoder.layers." + std::to_string(i) + ".", shape));
  m.post_layernorm_ = LayerNorm::load(w, p + "post_layernorm", H, eps);
  return m;
}

Tensor ClipVisionModel::embed(const Tensor& pixels) const {
  const ClipVisionConfig& c = config_;
  if (pixels.rank() != 4 || pixels.dim(1) != c.image_size || pixels.dim(2) != c.image_size ||
      pixels.dim(3) != c.num_channels)
    fail("internal: vision tower input of shape ", shape_str(pixels.shape()), ", expected N × ", c.image_size, " × ",
         c.image_size, " × ", c.num_channels);
  const int64_t N = pixels.dim(0), H = c.hidden_size, P = c.positions();
  const Tensor patches = patch_embedding_(pixels);  // N × s × s × H: the patches row-major, as torch's flatten
  Tensor x = Tensor::empty({N, P, H});
  for (int64_t n = 0; n < N; ++n) {
    float* dst = x.data() + n * P * H;
    std::memcpy(dst, class_embedding_.data(), sizeof(float) * H);
    std::memcpy(dst + H, patches.data() + n * (P - 1) * H, sizeof(float) * (P - 1) * H);
    const float* pos = position_embedding_.data();
    for (int64_t i = 0; i < P * H; ++i) dst[i] += pos[i];
  }
  return x;
}

ClipVisionOutput ClipVisionModel::forward(const Tensor& pixels) const {
  Tensor x = pre_layernorm_(embed(pixels));
  for (const ClipEncoderLayer& layer : layers_) {
    check_cancelled();
    x = layer(x);
  }
  const int64_t N = x.dim(0), P = x.dim(1), H = x.dim(2);
  Tensor cls = Tensor::empty({N, H});
  for (int64_t n = 0; n < N; ++n) std::memcpy(cls.data() + n * H, x.data() + n * P * H, sizeof(float) * H);
  ClipVisionOutput out;
  out.pooled = post_layernorm_(cls);
  out.last_hidden_state = std::move(x);
  return out;
}

}  // namespace octodiff
