#include "models/clip_encoder.h"

#include "core/error.h"
#include "kernels/activations.h"

namespace octodiff {

ClipActivation parse_clip_activation(const std::string& name) {
  if (name == "quick_gelu") return ClipActivation::QuickGelu;
  if (name == "gelu") return ClipActivation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ClipActivation::GeluTanh;
  fail("unsupported CLIP hidden_act '", name, "' (expected quick_gelu, gelu, gelu_new or gelu_pytorch_tanh)");
}

ClipEncoderLayer ClipEncoderLayer::load(WeightSource& w, const std::string& l, const ClipEncoderLayerShape& s) {
  constexpr kernels::Precision kF32 = kernels::Precision::F32;
  const int64_t H = s.hidden, F = s.intermediate;
  return ClipEncoderLayer{
      LayerNorm::load(w, l + "layer_norm1", H, s.layer_norm_eps),
      LayerNorm::load(w, l + "layer_norm2", H, s.layer_norm_eps),
      MultiHeadAttention::load(w,
                               {l + "self_attn.q_proj", l + "self_attn.k_proj", l + "self_attn.v_proj",
                                l + "self_attn.out_proj"},
                               H, H, s.heads, /*qkv_bias=*/true, /*self=*/true, kF32, s.causal),
      Linear::load(w, l + "mlp.fc1", H, F, true, kF32),
      Linear::load(w, l + "mlp.fc2", F, H, true, kF32),
      s.activation,
  };
}

Tensor ClipEncoderLayer::operator()(const Tensor& input) const {
  Tensor x = attention(norm1(input), nullptr, &input);
  Tensor h = fc1(norm2(x));
  switch (activation) {
    case ClipActivation::QuickGelu: kernels::quick_gelu(h.data(), h.numel(), h.data()); break;
    case ClipActivation::Gelu: kernels::gelu(h.data(), h.numel(), h.data(), kernels::Gelu::Erf); break;
    case ClipActivation::GeluTanh: kernels::gelu(h.data(), h.numel(), h.data(), kernels::Gelu::Tanh); break;
  }
  return fc2(h, &x);
}

}  // namespace octodiff
