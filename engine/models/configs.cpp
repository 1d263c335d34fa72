#include "models/configs.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_numbers.h"

namespace octodiff {
namespace {

using nlohmann::json;

json parse_config(const std::string& text, const std::string& what) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) fail("'", what, "' is not a JSON object");
    return j;
  } catch (const json::exception& e) {
    fail("'", what, "' is not valid JSON: ", e.what());
  }
}

// Reads j[key] into *out when present and not null; wrong types are errors naming the key.
template <typename T>
void read(const json& j, const char* key, T* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  try {
    *out = checked_get<T>(*it);
  } catch (const json::exception&) {
    fail("'", what, "': key '", key, "' has an unexpected value ", it->dump());
  }
}

// An int or a list of ints, broadcast to n entries.
void read_int_or_list(const json& j, const char* key, std::vector<int>* out, size_t n,
                      const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (it->is_number()) {
    int v = 0;
    read(j, key, &v, what);
    out->assign(n, v);
    return;
  }
  std::vector<int> v;
  read(j, key, &v, what);
  if (v.size() != n)
    fail("'", what, "': '", key, "' has ", v.size(), " entries but there are ", n, " blocks");
  *out = v;
}

void refuse_if(bool condition, const std::string& what, const std::string& setting) {
  if (condition) fail("'", what, "': unsupported model setting ", setting);
}

void require_positive(int v, const char* key, const std::string& what) {
  if (v <= 0 || v > 1'000'000) fail("'", what, "': '", key, "' must be a positive integer, got ", v);
}

// SDXL's addition_embed_type "text_time" and its two widths; other addition types are refused.
void read_addition_embedding(const json& j, UNetConfig& c, const std::string& what) {
  read(j, "addition_embed_type", &c.addition_embed_type, what);
  if (c.addition_embed_type.empty()) return;
  refuse_if(c.addition_embed_type != "text_time", what, "addition_embed_type '" + c.addition_embed_type + "'");
  read(j, "addition_time_embed_dim", &c.addition_time_embed_dim, what);
  read(j, "projection_class_embeddings_input_dim", &c.projection_class_embeddings_input_dim, what);
  for (auto [v, k] : {std::pair{c.addition_time_embed_dim, "addition_time_embed_dim"},
                      {c.projection_class_embeddings_input_dim, "projection_class_embeddings_input_dim"}})
    if (v <= 0 || v > 1'000'000)
      fail("'", what, "': addition_embed_type \"text_time\" needs a positive '", k, "', got ", v);
}

// The blocks: 1 to 8 of them, positive channel counts, block types this engine has, and the
// other sizes positive.
void check_unet_blocks(const UNetConfig& c, const std::string& what) {
  const size_t n = c.block_out_channels.size();
  if (n == 0 || n > 8) fail("'", what, "': block_out_channels must have 1 to 8 entries");
  for (int ch : c.block_out_channels) require_positive(ch, "block_out_channels", what);
  if (c.down_block_types.size() != n || c.up_block_types.size() != n)
    fail("'", what, "': down_block_types/up_block_types must have one entry per block_out_channels");
  for (const auto& t : c.down_block_types)
    refuse_if(t != "CrossAttnDownBlock2D" && t != "DownBlock2D", what, "down block '" + t + "'");
  for (const auto& t : c.up_block_types)
    refuse_if(t != "CrossAttnUpBlock2D" && t != "UpBlock2D", what, "up block '" + t + "'");
  for (auto [v, k] : {std::pair{c.in_channels, "in_channels"}, {c.out_channels, "out_channels"},
                      {c.layers_per_block, "layers_per_block"}, {c.norm_num_groups, "norm_num_groups"},
                      {c.cross_attention_dim, "cross_attention_dim"}})
    require_positive(v, k, what);
}

// Attention heads and transformer layers per block (an int or one per block), and the channel
// counts they and the norm groups must divide.
void read_unet_heads(const json& j, UNetConfig& c, const std::string& what) {
  const size_t n = c.block_out_channels.size();
  // diffusers: num_attention_heads = num_attention_heads or attention_head_dim (the field
  // historically named attention_head_dim holds the number of heads).
  c.num_heads.assign(n, 8);
  read_int_or_list(j, "attention_head_dim", &c.num_heads, n, what);
  read_int_or_list(j, "num_attention_heads", &c.num_heads, n, what);
  c.transformer_layers_per_block.assign(n, 1);
  read_int_or_list(j, "transformer_layers_per_block", &c.transformer_layers_per_block, n, what);
  for (size_t i = 0; i < n; ++i) {
    require_positive(c.num_heads[i], "attention_head_dim", what);
    if (c.block_out_channels[i] % c.num_heads[i])
      fail("'", what, "': block ", i, " has ", c.block_out_channels[i], " channels, not divisible by ",
           c.num_heads[i], " attention heads");
    if (c.block_out_channels[i] % c.norm_num_groups)
      fail("'", what, "': block ", i, " has ", c.block_out_channels[i], " channels, not divisible by ",
           c.norm_num_groups, " norm groups");
  }
}

// Settings of other model families (SDXL, class-conditioned, …) are refused by name.
void refuse_other_unet_settings(const json& j, const std::string& what) {
  auto str_or_null = [&](const char* key) {
    auto it = j.find(key);
    return (it == j.end() || it->is_null()) ? std::string() : it->dump();
  };
  for (const char* key : {"class_embed_type", "encoder_hid_dim", "reverse_transformer_layers_per_block",
                          "encoder_hid_dim_type", "num_class_embeds",
                          "timestep_post_act", "time_embedding_act_fn", "cross_attention_norm"})
    refuse_if(!str_or_null(key).empty(), what, std::string(key) + " = " + str_or_null(key));
  for (const auto& [key, supported] : {std::pair{"resnet_time_scale_shift", "default"},
                                       {"time_embedding_type", "positional"},
                                       {"mid_block_type", "UNetMidBlock2DCrossAttn"},
                                       {"act_fn", "silu"}}) {
    std::string v = supported;  // absent or null: the supported default
    read(j, key, &v, what);
    refuse_if(v != supported, what, std::string(key) + " '" + v + "'");
  }
  bool b = false;
  read(j, "only_cross_attention", &b, what);
  refuse_if(b, what, "only_cross_attention");
  b = false;
  read(j, "dual_cross_attention", &b, what);
  refuse_if(b, what, "dual_cross_attention");
  b = false;
  read(j, "center_input_sample", &b, what);
  refuse_if(b, what, "center_input_sample");
  double d = 1.0;
  read(j, "mid_block_scale_factor", &d, what);
  refuse_if(d != 1.0, what, "mid_block_scale_factor " + std::to_string(d));
  d = 1.0;
  read(j, "resnet_out_scale_factor", &d, what);
  refuse_if(d != 1.0, what, "resnet_out_scale_factor " + std::to_string(d));
  int k = 3;
  read(j, "conv_in_kernel", &k, what);
  refuse_if(k != 3, what, "conv_in_kernel " + std::to_string(k));
  k = 3;
  read(j, "conv_out_kernel", &k, what);
  refuse_if(k != 3, what, "conv_out_kernel " + std::to_string(k));
}

}  // namespace

ClipTextConfig ClipTextConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config(text, what);
  ClipTextConfig c;
  read(j, "vocab_size", &c.vocab_size, what);
  read(j, "hidden_size", &c.hidden_size, what);
  read(j, "intermediate_size", &c.intermediate_size, what);
  read(j, "num_hidden_layers", &c.num_hidden_layers, what);
  read(j, "num_attention_heads", &c.num_attention_heads, what);
  read(j, "max_position_embeddings", &c.max_position_embeddings, what);
  read(j, "hidden_act", &c.hidden_act, what);
  read(j, "layer_norm_eps", &c.layer_norm_eps, what);
  read(j, "projection_dim", &c.projection_dim, what);
  read(j, "eos_token_id", &c.eos_token_id, what);
  for (auto [v, k] : {std::pair{c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"},
                      {c.projection_dim, "projection_dim"},
                      {c.intermediate_size, "intermediate_size"}, {c.num_hidden_layers, "num_hidden_layers"},
                      {c.num_attention_heads, "num_attention_heads"},
                      {c.max_position_embeddings, "max_position_embeddings"}})
    require_positive(v, k, what);
  if (c.hidden_size % c.num_attention_heads)
    fail("'", what, "': hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ",
         c.num_attention_heads);
  refuse_if(c.hidden_act != "quick_gelu" && c.hidden_act != "gelu" && c.hidden_act != "gelu_new", what,
            "hidden_act '" + c.hidden_act + "'");
  return c;
}

ClipTextConfig ClipTextConfig::sd1() {
  ClipTextConfig c;
  c.hidden_size = 768;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  return c;
}

ClipTextConfig ClipTextConfig::sdxl_bigg() {
  ClipTextConfig c;
  c.hidden_size = 1280;
  c.intermediate_size = 5120;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 20;
  c.hidden_act = "gelu";
  c.projection_dim = 1280;
  return c;
}

ClipTextConfig ClipTextConfig::sd2() {
  ClipTextConfig c;
  c.hidden_size = 1024;
  c.intermediate_size = 4096;
  c.num_hidden_layers = 23;
  c.num_attention_heads = 16;
  c.hidden_act = "gelu";
  return c;
}

UNetConfig UNetConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config(text, what);
  UNetConfig c;
  read(j, "sample_size", &c.sample_size, what);
  read(j, "in_channels", &c.in_channels, what);
  read(j, "out_channels", &c.out_channels, what);
  read(j, "flip_sin_to_cos", &c.flip_sin_to_cos, what);
  read(j, "freq_shift", &c.freq_shift, what);
  read(j, "down_block_types", &c.down_block_types, what);
  read(j, "up_block_types", &c.up_block_types, what);
  read(j, "block_out_channels", &c.block_out_channels, what);
  read(j, "layers_per_block", &c.layers_per_block, what);
  read(j, "downsample_padding", &c.downsample_padding, what);
  read(j, "norm_num_groups", &c.norm_num_groups, what);
  read(j, "norm_eps", &c.norm_eps, what);
  read(j, "cross_attention_dim", &c.cross_attention_dim, what);
  read(j, "use_linear_projection", &c.use_linear_projection, what);
  read(j, "upcast_attention", &c.upcast_attention, what);
  read(j, "time_cond_proj_dim", &c.time_cond_proj_dim, what);
  if (c.time_cond_proj_dim != 0) require_positive(c.time_cond_proj_dim, "time_cond_proj_dim", what);
  read_addition_embedding(j, c, what);

  check_unet_blocks(c, what);
  read_unet_heads(j, c, what);
  refuse_other_unet_settings(j, what);
  return c;
}

UNetConfig UNetConfig::sd1() {
  UNetConfig c;
  c.cross_attention_dim = 768;
  return c;
}

UNetConfig UNetConfig::sdxl() {
  UNetConfig c;
  c.sample_size = 128;
  c.down_block_types = {"DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"};
  c.up_block_types = {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"};
  c.block_out_channels = {320, 640, 1280};
  c.cross_attention_dim = 2048;
  c.transformer_layers_per_block = {1, 2, 10};
  c.num_heads = {5, 10, 20};
  c.use_linear_projection = true;
  c.addition_embed_type = "text_time";
  c.addition_time_embed_dim = 256;
  c.projection_class_embeddings_input_dim = 2816;  // pooled 1280 + 6 ids × 256
  return c;
}

UNetConfig UNetConfig::sd2(bool v_model) {
  UNetConfig c;
  c.sample_size = v_model ? 96 : 64;
  c.cross_attention_dim = 1024;
  c.num_heads = {5, 10, 20, 20};
  c.use_linear_projection = true;
  c.upcast_attention = v_model;
  return c;
}

VaeConfig VaeConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config(text, what);
  VaeConfig c;
  read(j, "in_channels", &c.in_channels, what);
  read(j, "out_channels", &c.out_channels, what);
  read(j, "block_out_channels", &c.block_out_channels, what);
  read(j, "layers_per_block", &c.layers_per_block, what);
  read(j, "latent_channels", &c.latent_channels, what);
  read(j, "norm_num_groups", &c.norm_num_groups, what);
  read(j, "scaling_factor", &c.scaling_factor, what);
  read(j, "use_quant_conv", &c.use_quant_conv, what);
  read(j, "use_post_quant_conv", &c.use_post_quant_conv, what);
  read(j, "mid_block_add_attention", &c.mid_block_add_attention, what);
  read(j, "sample_size", &c.sample_size, what);
  read(j, "force_upcast", &c.force_upcast, what);
  const size_t n = c.block_out_channels.size();
  if (n == 0 || n > 8) fail("'", what, "': block_out_channels must have 1 to 8 entries");
  require_positive(c.norm_num_groups, "norm_num_groups", what);  // before dividing by it (found by fuzz_configs)
  for (int ch : c.block_out_channels) {
    require_positive(ch, "block_out_channels", what);
    if (ch % c.norm_num_groups)
      fail("'", what, "': ", ch, " channels are not divisible by ", c.norm_num_groups, " norm groups");
  }
  for (auto [v, k] : {std::pair{c.in_channels, "in_channels"}, {c.out_channels, "out_channels"},
                      {c.layers_per_block, "layers_per_block"}, {c.latent_channels, "latent_channels"},
                      {c.norm_num_groups, "norm_num_groups"}})
    require_positive(v, k, what);
  if (!(c.scaling_factor > 0)) fail("'", what, "': scaling_factor must be positive");
  std::vector<std::string> types;
  read(j, "down_block_types", &types, what);
  for (const auto& t : types) refuse_if(t != "DownEncoderBlock2D", what, "down block '" + t + "'");
  if (!types.empty() && types.size() != n) fail("'", what, "': one down block type per block_out_channels");
  types.clear();
  read(j, "up_block_types", &types, what);
  for (const auto& t : types) refuse_if(t != "UpDecoderBlock2D", what, "up block '" + t + "'");
  if (!types.empty() && types.size() != n) fail("'", what, "': one up block type per block_out_channels");
  std::string act = "silu";
  read(j, "act_fn", &act, what);
  refuse_if(act != "silu", what, "act_fn '" + act + "'");
  double shift = 0;
  read(j, "shift_factor", &shift, what);
  refuse_if(shift != 0.0, what, "shift_factor (an SD3/Flux VAE)");
  return c;
}

AutoencoderTinyConfig AutoencoderTinyConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config(text, what);
  AutoencoderTinyConfig c;
  read(j, "in_channels", &c.in_channels, what);
  read(j, "out_channels", &c.out_channels, what);
  read(j, "encoder_block_out_channels", &c.encoder_block_out_channels, what);
  read(j, "decoder_block_out_channels", &c.decoder_block_out_channels, what);
  read(j, "num_encoder_blocks", &c.num_encoder_blocks, what);
  read(j, "num_decoder_blocks", &c.num_decoder_blocks, what);
  read(j, "latent_channels", &c.latent_channels, what);
  read(j, "upsampling_scaling_factor", &c.upsampling_scaling_factor, what);
  read(j, "latent_magnitude", &c.latent_magnitude, what);
  read(j, "latent_shift", &c.latent_shift, what);
  read(j, "scaling_factor", &c.scaling_factor, what);
  std::vector<int> saved_copy;
  read(j, "block_out_channels", &saved_copy, what);
  if (!saved_copy.empty() && saved_copy != c.decoder_block_out_channels)
    fail("'", what, "': block_out_channels ", json(saved_copy).dump(), " contradicts decoder_block_out_channels ",
         json(c.decoder_block_out_channels).dump());
  std::string s = "relu";
  read(j, "act_fn", &s, what);
  refuse_if(s != "relu", what, "act_fn '" + s + "' (the tiny autoencoder is implemented with ReLU only)");
  s = "nearest";
  read(j, "upsample_fn", &s, what);
  refuse_if(s != "nearest", what, "upsample_fn '" + s + "'");
  double shift = 0;
  read(j, "shift_factor", &shift, what);
  refuse_if(shift != 0.0, what, "shift_factor (an SD3/Flux tiny autoencoder)");
  c.validate(what);
  return c;
}

void AutoencoderTinyConfig::validate(const std::string& what) const {
  for (auto [v, k] : {std::pair{in_channels, "in_channels"}, {out_channels, "out_channels"},
                      {latent_channels, "latent_channels"}})
    require_positive(v, k, what);
  auto check_half = [&](const char* half, const std::vector<int>& channels, const std::vector<int>& blocks) {
    if (channels.empty() || channels.size() > 8)
      fail("'", what, "': ", half, "_block_out_channels must have 1 to 8 entries");
    if (blocks.size() != channels.size())
      fail("'", what, "': num_", half, "_blocks has ", blocks.size(), " entries but ", half,
           "_block_out_channels has ", channels.size());
    for (int ch : channels) require_positive(ch, "block_out_channels", what);
    for (int ch : channels)
      refuse_if(ch != channels.front(), what,
                cat(half, "_block_out_channels ", json(channels).dump(),
                    " (diffusers' ", half, " feeds each stage the previous stage's width: all must be equal)"));
    for (int n : blocks)
      if (n < 0 || n > 1000) fail("'", what, "': num_", half, "_blocks entries must be 0 to 1000, got ", n);
  };
  check_half("encoder", encoder_block_out_channels, num_encoder_blocks);
  check_half("decoder", decoder_block_out_channels, num_decoder_blocks);
  refuse_if(upsampling_scaling_factor != 2, what,
            "upsampling_scaling_factor " + std::to_string(upsampling_scaling_factor) + " (only 2 is implemented)");
  if (!(scaling_factor > 0)) fail("'", what, "': scaling_factor must be positive");
  if (!(latent_magnitude > 0)) fail("'", what, "': latent_magnitude must be positive");
}

int AutoencoderTinyConfig::decoder_scale_factor() const {
  int f = 1;
  for (size_t i = 1; i < num_decoder_blocks.size(); ++i) f *= upsampling_scaling_factor;
  return f;
}

VaeConfig VaeConfig::sdxl() {
  VaeConfig c = sd();
  c.scaling_factor = 0.13025;
  c.sample_size = 1024;
  return c;
}

VaeConfig VaeConfig::sd() {
  VaeConfig c;
  c.block_out_channels = {128, 256, 512, 512};
  c.layers_per_block = 2;
  c.sample_size = 512;
  return c;
}

}  // namespace octodiff
