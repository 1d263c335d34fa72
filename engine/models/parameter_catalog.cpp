#include "models/parameter_catalog.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace octodiff {
namespace {

std::string idx(const std::string& prefix, int i) {
  return prefix + "." + std::to_string(i);
}

// Builds a catalog in the order the loaders take the tensors (models/*.cpp).
class Catalog {
 public:
  std::vector<ParameterSpec> specs;

  void add(const std::string& name, Shape shape, ParameterKind kind) {
    specs.push_back({name, std::move(shape), kind});
  }
  // Linear::load (a 1×1 conv stores its weight as (out, in, 1, 1)).
  void linear(const std::string& p, int64_t in, int64_t out, bool bias, bool conv1x1 = false) {
    add(p + ".weight", conv1x1 ? Shape{out, in, 1, 1} : Shape{out, in}, ParameterKind::Weight);
    if (bias) add(p + ".bias", {out}, ParameterKind::Bias);
  }
  void conv(const std::string& p, int64_t in, int64_t out, int k, bool bias = true) {
    add(p + ".weight", {out, in, k, k}, ParameterKind::Weight);
    if (bias) add(p + ".bias", {out}, ParameterKind::Bias);
  }
  // AutoencoderTinyBlock: conv.0, conv.2, conv.4 (3×3, with bias), no skip (in == out).
  void tiny_block(const std::string& p, int64_t c) {
    for (const char* i : {".conv.0", ".conv.2", ".conv.4"}) conv(p + i, c, c, 3);
  }
  void norm(const std::string& p, int64_t c) {
    add(p + ".weight", {c}, ParameterKind::NormScale);
    add(p + ".bias", {c}, ParameterKind::NormShift);
  }
  // ResnetBlock2D::load; temb = 0 for the VAE's resnets.
  void resnet(const std::string& p, int64_t in, int64_t out, int64_t temb) {
    norm(p + ".norm1", in);
    conv(p + ".conv1", in, out, 3);
    if (temb > 0) linear(p + ".time_emb_proj", temb, out, true);
    norm(p + ".norm2", out);
    conv(p + ".conv2", out, out, 3);
    if (in != out) linear(p + ".conv_shortcut", in, out, true, /*conv1x1=*/true);
  }
  // Transformer2D::load with BasicTransformerBlock::load.
  void transformer(const std::string& p, int64_t c, int64_t context, int depth, bool linear_projection) {
    norm(p + ".norm", c);
    linear(p + ".proj_in", c, c, true, !linear_projection);
    for (int d = 0; d < depth; ++d) {
      const std::string b = idx(p + ".transformer_blocks", d);
      norm(b + ".norm1", c);
      norm(b + ".norm2", c);
      norm(b + ".norm3", c);
      for (const char* a : {".attn1", ".attn2"}) {
        const int64_t kv_in = a == std::string(".attn1") ? c : context;
        linear(b + a + ".to_q", c, c, false);
        linear(b + a + ".to_k", kv_in, c, false);
        linear(b + a + ".to_v", kv_in, c, false);
        linear(b + a + ".to_out.0", c, c, true);
      }
      linear(b + ".ff.net.0.proj", c, 8 * c, true);
      linear(b + ".ff.net.2", 4 * c, c, true);
    }
    linear(p + ".proj_out", c, c, true, !linear_projection);
  }
  // VaeAttention::load (new-style names).
  void vae_attention(const std::string& p, int64_t c) {
    norm(p + ".group_norm", c);
    for (const char* n : {".to_q", ".to_k", ".to_v", ".to_out.0"}) linear(p + n, c, c, true);
  }
};

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser: a bijective, well-avalanching mix
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Four 16-bit uniforms summed (Irwin–Hall, n = 4) and standardised: mean 0, variance 1.
inline float approx_normal(uint64_t bits) {
  const float s =
      static_cast<float>((bits & 0xffff) + ((bits >> 16) & 0xffff) + ((bits >> 32) & 0xffff) + (bits >> 48));
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (s - 131070.0f) * kScale;
}

void fill_normal(const std::string& name, uint64_t seed, float stddev, int64_t n, float* dst) {
  const uint64_t key = mix64(seed ^ mix64(name_hash(name)));
  parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          dst[i] = stddev * approx_normal(mix64(key + static_cast<uint64_t>(i)));
      },
      1 << 16);
}

}  // namespace

std::vector<ParameterSpec> clip_text_parameters(const ClipTextConfig& c) {
  Catalog cat;
  const int64_t H = c.hidden_size, F = c.intermediate_size;
  cat.add("text_model.embeddings.token_embedding.weight", {c.vocab_size, H}, ParameterKind::Embedding);
  cat.add("text_model.embeddings.position_embedding.weight", {c.max_position_embeddings, H},
          ParameterKind::Embedding);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = idx("text_model.encoder.layers", i) + ".";
    cat.norm(l + "layer_norm1", H);
    cat.norm(l + "layer_norm2", H);
    for (const char* p : {"q_proj", "k_proj", "v_proj", "out_proj"})
      cat.linear(l + "self_attn." + p, H, H, true);
    cat.linear(l + "mlp.fc1", H, F, true);
    cat.linear(l + "mlp.fc2", F, H, true);
  }
  cat.norm("text_model.final_layer_norm", H);
  return cat.specs;
}

std::vector<ParameterSpec> clip_text_projection_parameters(const ClipTextConfig& c) {
  Catalog cat;
  cat.linear("text_projection", c.hidden_size, c.projection_dim, false);
  for (ParameterSpec& p : clip_text_parameters(c)) cat.specs.push_back(std::move(p));
  return cat.specs;
}

std::vector<ParameterSpec> controlnet_parameters(const ControlNetConfig& config) {
  Catalog cat;
  for (const ParameterSpec& p : unet_parameters(config.unet))
    for (const char* prefix : {"time_embedding.", "add_embedding.", "conv_in.", "down_blocks.", "mid_block."})
      if (p.name.rfind(prefix, 0) == 0) cat.specs.push_back(p);
  const auto& e = config.conditioning_embedding_out_channels;
  const auto& boc = config.unet.block_out_channels;
  cat.conv("controlnet_cond_embedding.conv_in", config.conditioning_channels, e[0], 3);
  for (size_t i = 0; i + 1 < e.size(); ++i) {
    cat.conv(idx("controlnet_cond_embedding.blocks", static_cast<int>(2 * i)), e[i], e[i], 3);
    cat.conv(idx("controlnet_cond_embedding.blocks", static_cast<int>(2 * i + 1)), e[i], e[i + 1], 3);
  }
  cat.conv("controlnet_cond_embedding.conv_out", e.back(), boc[0], 3);
  std::vector<int64_t> zero{boc[0]};
  for (size_t i = 0; i < boc.size(); ++i) {
    for (int j = 0; j < config.unet.layers_per_block; ++j) zero.push_back(boc[i]);
    if (i + 1 < boc.size()) zero.push_back(boc[i]);
  }
  for (size_t k = 0; k < zero.size(); ++k)
    cat.linear(idx("controlnet_down_blocks", static_cast<int>(k)), zero[k], zero[k], true, true);
  cat.linear("controlnet_mid_block", boc.back(), boc.back(), true, true);
  return cat.specs;
}

std::vector<ParameterSpec> unet_parameters(const UNetConfig& c) {
  Catalog cat;
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t T = c.time_embed_dim(), X = c.cross_attention_dim;
  if (c.time_cond_proj_dim > 0) cat.linear("time_embedding.cond_proj", c.time_cond_proj_dim, boc[0], false);
  cat.linear("time_embedding.linear_1", boc[0], T, true);
  cat.linear("time_embedding.linear_2", T, T, true);
  if (c.text_time()) {  // SDXL's add_embedding
    cat.linear("add_embedding.linear_1", c.projection_class_embeddings_input_dim, T, true);
    cat.linear("add_embedding.linear_2", T, T, true);
  }
  cat.conv("conv_in", c.in_channels, boc[0], 3);

  int64_t out_c = boc[0];
  for (int i = 0; i < n; ++i) {
    const std::string p = idx("down_blocks", i);
    const int64_t in_c = out_c;
    out_c = boc[i];
    for (int j = 0; j < c.layers_per_block; ++j) {
      cat.resnet(idx(p + ".resnets", j), j == 0 ? in_c : out_c, out_c, T);
      if (c.down_block_types[i] == "CrossAttnDownBlock2D")
        cat.transformer(idx(p + ".attentions", j), out_c, X, c.transformer_layers_per_block[i],
                        c.use_linear_projection);
    }
    if (i < n - 1) cat.conv(p + ".downsamplers.0.conv", out_c, out_c, 3);
  }

  const int64_t mid_c = boc[n - 1];
  cat.resnet("mid_block.resnets.0", mid_c, mid_c, T);
  cat.transformer("mid_block.attentions.0", mid_c, X, c.transformer_layers_per_block[n - 1],
                  c.use_linear_projection);
  cat.resnet("mid_block.resnets.1", mid_c, mid_c, T);

  int64_t prev_c = mid_c;
  for (int i = 0; i < n; ++i) {
    const int r = n - 1 - i;
    const std::string p = idx("up_blocks", i);
    const int64_t up_out = boc[r], skip_in = boc[std::max(r - 1, 0)];
    const int layers = c.layers_per_block + 1;
    for (int j = 0; j < layers; ++j) {
      const int64_t skip_c = (j == layers - 1) ? skip_in : up_out;
      cat.resnet(idx(p + ".resnets", j), (j == 0 ? prev_c : up_out) + skip_c, up_out, T);
      if (c.up_block_types[i] == "CrossAttnUpBlock2D")
        cat.transformer(idx(p + ".attentions", j), up_out, X, c.transformer_layers_per_block[r],
                        c.use_linear_projection);
    }
    if (i < n - 1) cat.conv(p + ".upsamplers.0.conv", up_out, up_out, 3);
    prev_c = up_out;
  }
  cat.norm("conv_norm_out", boc[0]);
  cat.conv("conv_out", boc[0], c.out_channels, 3);
  return cat.specs;
}

std::vector<ParameterSpec> vae_parameters(const VaeConfig& c, bool with_encoder) {
  Catalog cat;
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t L = c.latent_channels, top = boc[n - 1];
  auto mid = [&](const std::string& p) {
    cat.resnet(p + ".mid_block.resnets.0", top, top, 0);
    if (c.mid_block_add_attention) cat.vae_attention(p + ".mid_block.attentions.0", top);
    cat.resnet(p + ".mid_block.resnets.1", top, top, 0);
  };

  if (c.use_post_quant_conv) cat.linear("post_quant_conv", L, L, true, /*conv1x1=*/true);
  cat.conv("decoder.conv_in", L, top, 3);
  mid("decoder");
  int64_t prev = top;
  for (int i = 0; i < n; ++i) {
    const std::string p = idx("decoder.up_blocks", i);
    const int64_t out = boc[n - 1 - i];
    for (int j = 0; j < c.layers_per_block + 1; ++j)
      cat.resnet(idx(p + ".resnets", j), j == 0 ? prev : out, out, 0);
    if (i < n - 1) cat.conv(p + ".upsamplers.0.conv", out, out, 3);
    prev = out;
  }
  cat.norm("decoder.conv_norm_out", boc[0]);
  cat.conv("decoder.conv_out", boc[0], c.out_channels, 3);

  if (with_encoder) {
    cat.conv("encoder.conv_in", c.in_channels, boc[0], 3);
    int64_t in = boc[0];
    for (int i = 0; i < n; ++i) {
      const std::string p = idx("encoder.down_blocks", i);
      for (int j = 0; j < c.layers_per_block; ++j)
        cat.resnet(idx(p + ".resnets", j), j == 0 ? in : boc[i], boc[i], 0);
      if (i < n - 1) cat.conv(p + ".downsamplers.0.conv", boc[i], boc[i], 3);
      in = boc[i];
    }
    mid("encoder");
    cat.norm("encoder.conv_norm_out", top);
    cat.conv("encoder.conv_out", top, 2 * L, 3);
    if (c.use_quant_conv) cat.linear("quant_conv", 2 * L, 2 * L, true, /*conv1x1=*/true);
  }
  return cat.specs;
}

// AutoencoderTiny::load_decoder / load_encoder: diffusers' Sequential, one index per entry
// (ReLU and Upsample entries hold no tensors but take an index).
std::vector<ParameterSpec> autoencoder_tiny_parameters(const AutoencoderTinyConfig& c, bool with_encoder) {
  Catalog cat;
  const int64_t C = c.channels();
  int i = 0;
  auto name = [&](const char* half) { return std::string(half) + ".layers." + std::to_string(i++); };
  cat.conv(name("decoder"), c.latent_channels, C, 3);
  ++i;  // ReLU
  const size_t stages = c.num_decoder_blocks.size();
  for (size_t s = 0; s < stages; ++s) {
    for (int b = 0; b < c.num_decoder_blocks[s]; ++b) cat.tiny_block(name("decoder"), C);
    const bool last = s + 1 == stages;
    if (!last) ++i;  // Upsample
    cat.conv(name("decoder"), C, last ? c.out_channels : C, 3, /*bias=*/last);
  }
  if (with_encoder) {
    const int64_t E = c.encoder_block_out_channels.front();
    i = 0;
    for (size_t s = 0; s < c.num_encoder_blocks.size(); ++s) {
      if (s == 0)
        cat.conv(name("encoder"), c.in_channels, E, 3);
      else
        cat.conv(name("encoder"), E, E, 3, /*bias=*/false);
      for (int b = 0; b < c.num_encoder_blocks[s]; ++b) cat.tiny_block(name("encoder"), E);
    }
    cat.conv(name("encoder"), E, c.latent_channels, 3);
  }
  return cat.specs;
}

int64_t parameter_count(const std::vector<ParameterSpec>& params) {
  int64_t total = 0;
  for (const auto& p : params) total += shape_numel(p.shape);
  return total;
}

void synthetic_parameter_values(const ParameterSpec& p, uint64_t seed, float* dst) {
  const int64_t n = shape_numel(p.shape);
  switch (p.kind) {
    case ParameterKind::NormScale:
      std::fill(dst, dst + n, 1.0f);
      return;
    case ParameterKind::NormShift:
      std::fill(dst, dst + n, 0.0f);
      return;
    case ParameterKind::Bias:
      fill_normal(p.name, seed, 0.01f, n, dst);
      return;
    case ParameterKind::Embedding:
      fill_normal(p.name, seed, 0.02f, n, dst);
      return;
    case ParameterKind::Weight: {
      const int64_t fan_in = p.shape.empty() || p.shape[0] == 0 ? 1 : std::max<int64_t>(1, n / p.shape[0]);
      fill_normal(p.name, seed, static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))), n, dst);
      return;
    }
  }
}

void synthetic_values(const std::string& name, const Shape& shape, uint64_t seed, float* dst) {
  synthetic_parameter_values({name, shape, shape.size() >= 2 ? ParameterKind::Weight : ParameterKind::Bias},
                             seed, dst);
}

}  // namespace octodiff
