// StableDiffusionSafetyChecker — the safety checker of the Flax (and torch) SD pipeline
// (diffusers' safety_checker_flax.py, safety_checker.py; spec/flax-family.md §4, pipeline.md §7):
//
//   pooled = ClipVisionModel(clip_input).pooled        N × hidden
//   e = visual_projection(pooled)                       N × projection_dim, no bias
//   cos_s = cos(e, special_care_embeds)  (N × 3),  cos_c = cos(e, concept_embeds)  (N × 17)
//           (rows L2-normalised with the norm clamped to ≥ 1e-12, then a product)
//   special = round3(cos_s − special_care_embeds_weights);   is_special = any(special > 0)
//   concept = round3(cos_c − concept_embeds_weights + 0.01·is_special);   nsfw = any(concept > 0)
//
// As the Flax module computes it: everything in float32, round3(x) = rint(x · 1000) / 1000 in
// float32 with ties to even (jnp.round). The torch checker differs in two corners this does not
// copy: it rounds in double precision (Python's round of float32 − float), and once one special
// concept scores > 0 it adds the 0.01 to the special concepts after it as well. One Flax corner
// is not copied either: FlaxStableDiffusionPipeline.from_pretrained(dtype=bfloat16) builds
// `visual_projection` (only it: the vision tower takes no dtype) in bfloat16; here it is float32
// in every mode (bf16 weights, as revision="bf16" stores them, are widened exactly).
//
// Parameters: diffusers' safety_checker folder names (`vision_model.vision_model.*`,
// `visual_projection.weight`, `concept_embeds`, `special_care_embeds`, `concept_embeds_weights`,
// `special_care_embeds_weights`); Flax msgpack files load through io/flax_msgpack.h's names.
#pragma once

#include <string>
#include <vector>

#include "models/clip_vision_model.h"

namespace octodiff {

// transformers' CLIPConfig as the safety checker reads it: its vision_config and projection_dim.
struct SafetyCheckerConfig {
  ClipVisionConfig vision;
  int projection_dim = 512;  // CLIPConfig's default; SD's checker: 768

  // A safety_checker/config.json text: "vision_config" (with "vision_config_dict", which older
  // files carry and transformers lets override it, applied on top) and "projection_dim".
  static SafetyCheckerConfig from_json(const std::string& text, const std::string& what);
};

constexpr int kSafetyConcepts = 17;      // concept_embeds rows (fixed in diffusers)
constexpr int kSafetySpecialCare = 3;    // special_care_embeds rows

struct SafetyScores {
  Tensor pooled;           // N × hidden
  Tensor image_embeds;     // N × projection_dim
  Tensor special_cos;      // N × 3
  Tensor concept_cos;      // N × 17
  Tensor special_scores;   // N × 3, rounded to 3 decimals
  Tensor concept_scores;   // N × 17, rounded, with the special-care adjustment
  std::vector<bool> special_care;  // N: any special score > 0
  std::vector<bool> nsfw;          // N: any concept score > 0
};

class SafetyChecker {
 public:
  // Reads every parameter from `w` and calls w.finish().
  static SafetyChecker load(WeightSource& w, const SafetyCheckerConfig& config);

  // clip_input: N × S × S × 3 (NHWC), CLIP-preprocessed (preprocess/clip_image_processor.h).
  SafetyScores check(const Tensor& clip_input) const;

  const SafetyCheckerConfig& config() const { return config_; }

 private:
  SafetyCheckerConfig config_;
  ClipVisionModel vision_;
  Linear visual_projection_;
  Tensor concept_embeds_, special_care_embeds_;                // 17 × proj, 3 × proj
  std::vector<float> concept_weights_, special_care_weights_;  // 17, 3
};

// Row-wise cosine similarity of a (n × d) and b (m × d) as jax_cosine_distance: n × m.
Tensor cosine_similarity(const Tensor& a, const Tensor& b);
// jnp.round(x, 3) for float32.
float round3(float x);

}  // namespace octodiff
