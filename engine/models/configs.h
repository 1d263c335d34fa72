// Model configurations, read from each component's config.json the way diffusers/transformers
// read them: keys present override the class defaults, extra keys are ignored, and settings this
// engine does not implement are refused with a message naming them (never silently ignored).
#pragma once

#include <string>
#include <vector>

namespace octodiff {

struct ClipTextConfig {
  int vocab_size = 49408;
  int hidden_size = 512;
  int intermediate_size = 2048;
  int num_hidden_layers = 12;
  int num_attention_heads = 8;
  int max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";  // quick_gelu | gelu | gelu_new
  double layer_norm_eps = 1e-5;

  static ClipTextConfig from_json(const std::string& text, const std::string& what);
  static ClipTextConfig sd1();  // CLIP ViT-L/14 text tower
  static ClipTextConfig sd2();  // OpenCLIP ViT-H/14 text tower, 23 layers
  int head_dim() const { return hidden_size / num_attention_heads; }
};

struct UNetConfig {
  int sample_size = 64;
  int in_channels = 4;
  int out_channels = 4;
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  std::vector<std::string> down_block_types = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                               "CrossAttnDownBlock2D", "DownBlock2D"};
  std::vector<std::string> up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                                             "CrossAttnUpBlock2D"};
  std::vector<int> block_out_channels = {320, 640, 1280, 1280};
  int layers_per_block = 2;
  int downsample_padding = 1;
  int norm_num_groups = 32;
  double norm_eps = 1e-5;
  int cross_attention_dim = 1280;
  std::vector<int> transformer_layers_per_block = {1, 1, 1, 1};
  std::vector<int> num_heads = {8, 8, 8, 8};  // per down block ("attention_head_dim" quirk applied)
  bool use_linear_projection = false;
  bool upcast_attention = false;  // fp32 compute already; accepted for SD2.1 configs
  // LCM-distilled UNets: the width of the guidance embedding (`timestep_cond`) that
  // time_embedding.cond_proj maps onto the sinusoidal projection; 0 = none (diffusers: null).
  int time_cond_proj_dim = 0;

  static UNetConfig from_json(const std::string& text, const std::string& what);
  static UNetConfig sd1();
  static UNetConfig sd2(bool v_model);  // sample_size 96 for the 768-v model, else 64
  int time_embed_dim() const { return 4 * block_out_channels[0]; }
  // The latent size must be divisible by this (each down block halves it).
  int latent_multiple() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
};

struct VaeConfig {
  int in_channels = 3;
  int out_channels = 3;
  std::vector<int> block_out_channels = {64};
  int layers_per_block = 1;
  int latent_channels = 4;
  int norm_num_groups = 32;
  double scaling_factor = 0.18215;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  int sample_size = 32;

  static VaeConfig from_json(const std::string& text, const std::string& what);
  static VaeConfig sd();  // SD 1.x / 2.x VAE
  int scale_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
};

}  // namespace octodiff
