// One layer of CLIP's transformer encoder (transformers' CLIPEncoderLayer), shared by the text
// tower (models/clip_text_model.h, causal) and the vision tower (models/clip_vision_model.h):
//
//   x += out_proj(self_attention(layer_norm1(x)))
//   x += fc2(act(fc1(layer_norm2(x))))
//
// Always float32 (the Flax pipeline runs both CLIP towers in float32 whatever its dtype).
#pragma once

#include <string>

#include "models/attention.h"
#include "models/layers.h"

namespace octodiff {

enum class ClipActivation { QuickGelu, Gelu, GeluTanh };
// transformers' hidden_act names: "quick_gelu", "gelu" (erf), "gelu_new"/"gelu_pytorch_tanh" (tanh).
ClipActivation parse_clip_activation(const std::string& name);

struct ClipEncoderLayerShape {
  int64_t hidden = 0, intermediate = 0;
  int64_t heads = 1;
  float layer_norm_eps = 1e-5f;
  ClipActivation activation = ClipActivation::QuickGelu;
  bool causal = false;  // the text tower's causal mask; the vision tower attends everywhere
};

struct ClipEncoderLayer {
  LayerNorm norm1, norm2;
  MultiHeadAttention attention;
  Linear fc1, fc2;
  ClipActivation activation = ClipActivation::QuickGelu;

  // `prefix` names the layer, e.g. "text_model.encoder.layers.3." (with the trailing dot).
  static ClipEncoderLayer load(WeightSource& w, const std::string& prefix, const ClipEncoderLayerShape& shape);
  // x: N × L × hidden → the same shape.
  Tensor operator()(const Tensor& x) const;
};

}  // namespace octodiff
