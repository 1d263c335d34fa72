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
  // CLIPTextModelWithProjection (models/clip_text_projection.h): the width of text_projection.
  int projection_dim = 512;
  // Where the pooled (EOS) token is: 2, what every config saved before transformers fixed it
  // holds (SD's and SDXL's), means the first position of the highest id; else the first
  // position holding this id.
  int eos_token_id = 2;

  static ClipTextConfig from_json(const std::string& text, const std::string& what);
  static ClipTextConfig sd1();  // CLIP ViT-L/14 text tower
  static ClipTextConfig sd2();  // OpenCLIP ViT-H/14 text tower, 23 layers
  static ClipTextConfig sdxl_bigg();  // SDXL's text_encoder_2: OpenCLIP ViT-bigG/14, projection 1280
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
  // SDXL: addition_embed_type "text_time" (empty: none). The pooled text embedding ‖ the
  // sinusoidal embeddings (addition_time_embed_dim each) of the size/crop ids, a vector of
  // projection_class_embeddings_input_dim, goes through add_embedding (linear_1, SiLU, linear_2)
  // and is added to the time embedding.
  std::string addition_embed_type;
  int addition_time_embed_dim = 0;
  int projection_class_embeddings_input_dim = 0;

  static UNetConfig from_json(const std::string& text, const std::string& what);
  static UNetConfig sd1();
  static UNetConfig sdxl();  // stable-diffusion-xl-base-1.0's UNet
  bool text_time() const { return addition_embed_type == "text_time"; }
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
  // diffusers' flag (default true) that SDXL pipelines read: this VAE's activations overflow
  // 16-bit floats, decode it in float32. Octodiff's SDXL models honour it in bf16 runs too (the VAE
  // is packed and run in f32); the fp16-fix VAE says false and decodes in bf16. SD 1.x/2.x ignore it.
  bool force_upcast = true;

  static VaeConfig from_json(const std::string& text, const std::string& what);
  static VaeConfig sd();  // SD 1.x / 2.x VAE
  static VaeConfig sdxl();  // SDXL's VAE: SD's architecture, scaling_factor 0.13025
  int scale_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
};

// diffusers' AutoencoderTiny (TAESD, madebyollin): a 3×3-conv/ReLU encoder and decoder, no norms,
// no attention (models/autoencoder_tiny.h). Defaults are TAESD's (= AutoencoderTiny()'s).
// diffusers' EncoderTiny/DecoderTiny feed each stage the previous stage's width, so every entry
// of a *_block_out_channels must be the same (anything else would fail in diffusers too).
// `block_out_channels`, which save_pretrained writes as a copy of decoder_block_out_channels, is
// checked against it; diffusers ignores it when loading.
struct AutoencoderTinyConfig {
  int in_channels = 3;
  int out_channels = 3;
  std::vector<int> encoder_block_out_channels = {64, 64, 64, 64};
  std::vector<int> decoder_block_out_channels = {64, 64, 64, 64};
  std::vector<int> num_encoder_blocks = {1, 3, 3, 3};  // residual blocks per encoder stage
  std::vector<int> num_decoder_blocks = {3, 3, 3, 1};  // residual blocks per decoder stage
  int latent_channels = 4;
  int upsampling_scaling_factor = 2;  // nearest-neighbour; only 2 is implemented
  // Used only by AutoencoderTiny.forward's 8-bit latent round trip (scale_latents), never by
  // encode/decode or the pipelines: kept for completeness.
  double latent_magnitude = 3;
  double latent_shift = 0.5;
  // What pipelines divide latents by before decode and multiply encoder latents by: 1.0 for
  // every TAESD (it decodes the UNet's latents as they are).
  double scaling_factor = 1.0;

  static AutoencoderTinyConfig from_json(const std::string& text, const std::string& what);
  // Checks the invariants from_json enforces (for configs built in code, e.g. from a single file).
  void validate(const std::string& what) const;
  int channels() const { return decoder_block_out_channels.front(); }  // the decoder's width
  // Image pixels per latent pixel: decoder (upsampling_scaling_factor per stage after the first)
  // and encoder (one stride-2 convolution per stage after the first).
  int decoder_scale_factor() const;
  int encoder_scale_factor() const { return 1 << (static_cast<int>(num_encoder_blocks.size()) - 1); }
};

}  // namespace octodiff
