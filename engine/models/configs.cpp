#include "models/configs.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/config_json.h"

namespace octodiff {
namespace {

using nlohmann::json;

// An int or a list of ints, broadcast to n entries.
void read_int_or_list(const json& j, const char* key, std::vector<int>* out, size_t n,
                      const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (it->is_number()) {
    int v = 0;
    read_config_key(j, key, &v, what);
    out->assign(n, v);
    return;
  }
  std::vector<int> v;
  read_config_key(j, key, &v, what);
  if (v.size() != n)
    fail("'", what, "': '", key, "' has ", v.size(), " entries but there are ", n, " blocks");
  *out = v;
}

void refuse_if(bool condition, const std::string& what, const std::string& setting) {
  if (condition) fail("'", what, "': unsupported model setting ", setting);
}

// How a refused setting is named: the key (a flag), "key value" (a number), "key 'value'" (a name).
std::string setting_text(const char* key, bool) {
  return key;
}
std::string setting_text(const char* key, int v) {
  return std::string(key) + " " + std::to_string(v);
}
std::string setting_text(const char* key, double v) {
  return std::string(key) + " " + std::to_string(v);
}
std::string setting_text(const char* key, const std::string& v) {
  return std::string(key) + " '" + v + "'";
}

// Refuses j[key] unless it is absent, null or `supported`; `note` follows the setting's name.
template <typename T>
void refuse_unless(const json& j, const char* key, const T& supported, const std::string& what,
                   const std::string& note = "") {
  T v = supported;
  read_config_key(j, key, &v, what);
  refuse_if(v != supported, what, setting_text(key, v) + note);
}

void require_positive(int v, const char* key, const std::string& what) {
  if (v <= 0 || v > 1'000'000) fail("'", what, "': '", key, "' must be a positive integer, got ", v);
}

// SDXL's addition_embed_type "text_time" and its two widths; other addition types are refused.
void read_addition_embedding(const json& j, UNetConfig& c, const std::string& what) {
  read_config_key(j, "addition_embed_type", &c.addition_embed_type, what);
  if (c.addition_embed_type.empty()) return;
  refuse_if(c.addition_embed_type != "text_time", what, "addition_embed_type '" + c.addition_embed_type + "'");
  read_config_key(j, "addition_time_embed_dim", &c.addition_time_embed_dim, what);
  read_config_key(j, "projection_class_embeddings_input_dim", &c.projection_class_embeddings_input_dim, what);
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
                                       {"act_fn", "silu"}})
    refuse_unless(j, key, std::string(supported), what);
  for (const char* key : {"only_cross_attention", "dual_cross_attention", "center_input_sample"})
    refuse_unless(j, key, false, what);
  for (const char* key : {"mid_block_scale_factor", "resnet_out_scale_factor"})
    refuse_unless(j, key, 1.0, what);
  for (const char* key : {"conv_in_kernel", "conv_out_kernel"}) refuse_unless(j, key, 3, what);
}

}  // namespace

ClipTextConfig ClipTextConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config_object(text, what);
  ClipTextConfig c;
  read_config_key(j, "vocab_size", &c.vocab_size, what);
  read_config_key(j, "hidden_size", &c.hidden_size, what);
  read_config_key(j, "intermediate_size", &c.intermediate_size, what);
  read_config_key(j, "num_hidden_layers", &c.num_hidden_layers, what);
  read_config_key(j, "num_attention_heads", &c.num_attention_heads, what);
  read_config_key(j, "max_position_embeddings", &c.max_position_embeddings, what);
  read_config_key(j, "hidden_act", &c.hidden_act, what);
  read_config_key(j, "layer_norm_eps", &c.layer_norm_eps, what);
  read_config_key(j, "projection_dim", &c.projection_dim, what);
  read_config_key(j, "eos_token_id", &c.eos_token_id, what);
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

namespace {

// The defaults with a text tower of these sizes.
ClipTextConfig clip_text_tower(int hidden_size, int intermediate_size, int num_hidden_layers,
                               int num_attention_heads) {
  ClipTextConfig c;
  c.hidden_size = hidden_size;
  c.intermediate_size = intermediate_size;
  c.num_hidden_layers = num_hidden_layers;
  c.num_attention_heads = num_attention_heads;
  return c;
}

}  // namespace

ClipTextConfig ClipTextConfig::sd1() {
  return clip_text_tower(768, 3072, 12, 12);
}

ClipTextConfig ClipTextConfig::sdxl_bigg() {
  ClipTextConfig c = clip_text_tower(1280, 5120, 32, 20);
  c.hidden_act = "gelu";
  c.projection_dim = 1280;
  return c;
}

ClipTextConfig ClipTextConfig::sd2() {
  ClipTextConfig c = clip_text_tower(1024, 4096, 23, 16);
  c.hidden_act = "gelu";
  return c;
}

UNetConfig UNetConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config_object(text, what);
  UNetConfig c;
  read_config_key(j, "sample_size", &c.sample_size, what);
  read_config_key(j, "in_channels", &c.in_channels, what);
  read_config_key(j, "out_channels", &c.out_channels, what);
  read_config_key(j, "flip_sin_to_cos", &c.flip_sin_to_cos, what);
  read_config_key(j, "freq_shift", &c.freq_shift, what);
  read_config_key(j, "down_block_types", &c.down_block_types, what);
  read_config_key(j, "up_block_types", &c.up_block_types, what);
  read_config_key(j, "block_out_channels", &c.block_out_channels, what);
  read_config_key(j, "layers_per_block", &c.layers_per_block, what);
  read_config_key(j, "downsample_padding", &c.downsample_padding, what);
  read_config_key(j, "norm_num_groups", &c.norm_num_groups, what);
  read_config_key(j, "norm_eps", &c.norm_eps, what);
  read_config_key(j, "cross_attention_dim", &c.cross_attention_dim, what);
  read_config_key(j, "use_linear_projection", &c.use_linear_projection, what);
  read_config_key(j, "upcast_attention", &c.upcast_attention, what);
  read_config_key(j, "time_cond_proj_dim", &c.time_cond_proj_dim, what);
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
  json j = parse_config_object(text, what);
  VaeConfig c;
  read_config_key(j, "in_channels", &c.in_channels, what);
  read_config_key(j, "out_channels", &c.out_channels, what);
  read_config_key(j, "block_out_channels", &c.block_out_channels, what);
  read_config_key(j, "layers_per_block", &c.layers_per_block, what);
  read_config_key(j, "latent_channels", &c.latent_channels, what);
  read_config_key(j, "norm_num_groups", &c.norm_num_groups, what);
  read_config_key(j, "scaling_factor", &c.scaling_factor, what);
  read_config_key(j, "use_quant_conv", &c.use_quant_conv, what);
  read_config_key(j, "use_post_quant_conv", &c.use_post_quant_conv, what);
  read_config_key(j, "mid_block_add_attention", &c.mid_block_add_attention, what);
  read_config_key(j, "sample_size", &c.sample_size, what);
  read_config_key(j, "force_upcast", &c.force_upcast, what);
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
  read_config_key(j, "down_block_types", &types, what);
  for (const auto& t : types) refuse_if(t != "DownEncoderBlock2D", what, "down block '" + t + "'");
  if (!types.empty() && types.size() != n) fail("'", what, "': one down block type per block_out_channels");
  types.clear();
  read_config_key(j, "up_block_types", &types, what);
  for (const auto& t : types) refuse_if(t != "UpDecoderBlock2D", what, "up block '" + t + "'");
  if (!types.empty() && types.size() != n) fail("'", what, "': one up block type per block_out_channels");
  refuse_unless(j, "act_fn", std::string("silu"), what);
  double shift = 0;
  read_config_key(j, "shift_factor", &shift, what);
  refuse_if(shift != 0.0, what, "shift_factor (an SD3/Flux VAE)");
  return c;
}

AutoencoderTinyConfig AutoencoderTinyConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config_object(text, what);
  AutoencoderTinyConfig c;
  read_config_key(j, "in_channels", &c.in_channels, what);
  read_config_key(j, "out_channels", &c.out_channels, what);
  read_config_key(j, "encoder_block_out_channels", &c.encoder_block_out_channels, what);
  read_config_key(j, "decoder_block_out_channels", &c.decoder_block_out_channels, what);
  read_config_key(j, "num_encoder_blocks", &c.num_encoder_blocks, what);
  read_config_key(j, "num_decoder_blocks", &c.num_decoder_blocks, what);
  read_config_key(j, "latent_channels", &c.latent_channels, what);
  read_config_key(j, "upsampling_scaling_factor", &c.upsampling_scaling_factor, what);
  read_config_key(j, "latent_magnitude", &c.latent_magnitude, what);
  read_config_key(j, "latent_shift", &c.latent_shift, what);
  read_config_key(j, "scaling_factor", &c.scaling_factor, what);
  std::vector<int> saved_copy;
  read_config_key(j, "block_out_channels", &saved_copy, what);
  if (!saved_copy.empty() && saved_copy != c.decoder_block_out_channels)
    fail("'", what, "': block_out_channels ", json(saved_copy).dump(), " contradicts decoder_block_out_channels ",
         json(c.decoder_block_out_channels).dump());
  refuse_unless(j, "act_fn", std::string("relu"), what,
                " (the tiny autoencoder is implemented with ReLU only)");
  refuse_unless(j, "upsample_fn", std::string("nearest"), what);
  double shift = 0;
  read_config_key(j, "shift_factor", &shift, what);
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
