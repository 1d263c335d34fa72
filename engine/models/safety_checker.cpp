#include "models/safety_checker.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_numbers.h"

namespace octodiff {

SafetyCheckerConfig SafetyCheckerConfig::from_json(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'", what, "' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("'", what, "' is not a JSON object");
  nlohmann::json vision = nlohmann::json::object();
  for (const char* key : {"vision_config", "vision_config_dict"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_object()) fail("'", what, "': \"", key, "\" is not an object");
    vision.update(j[key]);
  }
  SafetyCheckerConfig c;
  c.vision = ClipVisionConfig::from_json(vision.dump(), what);
  if (j.contains("projection_dim")) {
    if (!j["projection_dim"].is_number_integer()) fail("'", what, "': \"projection_dim\" is not an integer");
    try {
      c.projection_dim = checked_get<int>(j["projection_dim"]);
    } catch (const nlohmann::json::exception&) {
      fail("'", what, "': projection_dim ", j["projection_dim"].dump(), " is out of range");
    }
  }
  if (c.projection_dim <= 0 || c.projection_dim > (1 << 16))
    fail("'", what, "': projection_dim ", c.projection_dim, " is out of range");
  return c;
}

SafetyChecker SafetyChecker::load(WeightSource& w, const SafetyCheckerConfig& c) {
  SafetyChecker s;
  s.config_ = c;
  const int64_t P = c.projection_dim;
  s.vision_ = ClipVisionModel::load(w, "vision_model.vision_model.", c.vision);
  s.visual_projection_ = Linear::load(w, "visual_projection", c.vision.hidden_size, P, /*has_bias=*/false,
                                      kernels::Precision::F32);
  s.concept_embeds_ = w.take("concept_embeds", {kSafetyConcepts, P});
  s.special_care_embeds_ = w.take("special_care_embeds", {kSafetySpecialCare, P});
  s.concept_weights_ = to_vector(w.take("concept_embeds_weights", {kSafetyConcepts}));
  s.special_care_weights_ = to_vector(w.take("special_care_embeds_weights", {kSafetySpecialCare}));
  w.finish();
  return s;
}

float round3(float x) {
  const float scaled = x * 1000.0f;  // numpy's around: multiply, rint, divide, in the array's dtype
  return std::nearbyint(scaled) / 1000.0f;
}

namespace {

// Rows divided by max(‖row‖₂, 1e-12), in float32 like jnp.linalg.norm on a float32 array.
Tensor l2_normalised_rows(const Tensor& x) {
  const int64_t n = x.dim(0), d = x.dim(1);
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * d;
    float sum = 0.0f;
    for (int64_t k = 0; k < d; ++k) sum += row[k] * row[k];
    const float norm = std::max(std::sqrt(sum), 1e-12f);
    for (int64_t k = 0; k < d; ++k) y.data()[i * d + k] = row[k] / norm;
  }
  return y;
}

}  // namespace

Tensor cosine_similarity(const Tensor& a, const Tensor& b) {
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != b.dim(1))
    fail("internal: cosine similarity of ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  const Tensor na = l2_normalised_rows(a), nb = l2_normalised_rows(b);
  const int64_t n = a.dim(0), m = b.dim(0), d = a.dim(1);
  Tensor out = Tensor::empty({n, m});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float dot = 0.0f;
      for (int64_t k = 0; k < d; ++k) dot += na.data()[i * d + k] * nb.data()[j * d + k];
      out.data()[i * m + j] = dot;
    }
  return out;
}

SafetyScores SafetyChecker::check(const Tensor& clip_input) const {
  SafetyScores s;
  s.pooled = vision_.forward(clip_input).pooled;
  s.image_embeds = visual_projection_(s.pooled);
  s.special_cos = cosine_similarity(s.image_embeds, special_care_embeds_);
  s.concept_cos = cosine_similarity(s.image_embeds, concept_embeds_);
  const int64_t N = s.pooled.dim(0);
  s.special_scores = Tensor::empty({N, kSafetySpecialCare});
  s.concept_scores = Tensor::empty({N, kSafetyConcepts});
  for (int64_t i = 0; i < N; ++i) {
    bool special = false;
    for (int j = 0; j < kSafetySpecialCare; ++j) {
      const float v = round3(s.special_cos.data()[i * kSafetySpecialCare + j] - special_care_weights_[j]);
      s.special_scores.data()[i * kSafetySpecialCare + j] = v;
      special = special || v > 0.0f;
    }
    const float adjustment = special ? 0.01f : 0.0f;
    bool nsfw = false;
    for (int j = 0; j < kSafetyConcepts; ++j) {
      const float v = round3(s.concept_cos.data()[i * kSafetyConcepts + j] - concept_weights_[j] + adjustment);
      s.concept_scores.data()[i * kSafetyConcepts + j] = v;
      nsfw = nsfw || v > 0.0f;
    }
    s.special_care.push_back(special);
    s.nsfw.push_back(nsfw);
  }
  return s;
}

}  // namespace octodiff
