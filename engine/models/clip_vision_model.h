// CLIPVisionModel — the image tower of CLIP (the SD safety checker's: OpenAI ViT-L/14 at 224×224),
// read top to bottom like transformers' CLIPVisionTransformer:
//
//   patches = patch_embedding(pixels)           conv k = stride = patch_size, no bias
//   x = [class_embedding; patches] + position_embedding[0..P]     (P = (image_size / patch)²)
//   x = pre_layrnorm(x)
//   for each layer: x = ClipEncoderLayer(x)     the text tower's layer without the causal mask
//   pooled = post_layernorm(x[:, 0])            the class token
//
// Float32 throughout (the Flax safety checker builds its vision tower in float32).
#pragma once

#include <string>
#include <vector>

#include "io/weight_source.h"
#include "models/clip_encoder.h"
#include "models/layers.h"

namespace octodiff {

// transformers' CLIPVisionConfig (its defaults: ViT-B/32).
struct ClipVisionConfig {
  int hidden_size = 768;
  int intermediate_size = 3072;
  int num_hidden_layers = 12;
  int num_attention_heads = 12;
  int num_channels = 3;
  int image_size = 224;
  int patch_size = 32;
  std::string hidden_act = "quick_gelu";
  double layer_norm_eps = 1e-5;

  // Fields of a "vision_config" JSON object text over the defaults; errors name `what`.
  static ClipVisionConfig from_json(const std::string& text, const std::string& what);
  int patches_per_side() const { return image_size / patch_size; }
  int positions() const { return patches_per_side() * patches_per_side() + 1; }
  // Throws (naming `what`) unless the sizes are positive and consistent.
  void validate(const std::string& what) const;
};

struct ClipVisionOutput {
  Tensor last_hidden_state;  // N × positions × hidden (before post_layernorm)
  Tensor pooled;             // N × hidden: post_layernorm of the class token
};

class ClipVisionModel {
 public:
  // Reads `<prefix>embeddings.*`, `<prefix>pre_layrnorm.*`, `<prefix>encoder.layers.N.*` and
  // `<prefix>post_layernorm.*` (prefix e.g. "vision_model.vision_model."); does not call finish().
  static ClipVisionModel load(WeightSource& w, const std::string& prefix, const ClipVisionConfig& config);

  // pixels: N × image_size × image_size × num_channels (NHWC; CLIP-normalised values).
  ClipVisionOutput forward(const Tensor& pixels) const;

  const ClipVisionConfig& config() const { return config_; }

 private:
  Tensor embed(const Tensor& pixels) const;  // N × positions × hidden

  ClipVisionConfig config_;
  Conv2d patch_embedding_;
  std::vector<float> class_embedding_;  // hidden
  Tensor position_embedding_;           // positions × hidden
  LayerNorm pre_layernorm_, post_layernorm_;
  std::vector<ClipEncoderLayer> layers_;
};

}  // namespace octodiff
