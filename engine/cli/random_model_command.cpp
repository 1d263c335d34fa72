// make-random-model: a full-size Stable Diffusion model with random weights.
//
// Every tensor comes from the parameter catalogs (models/parameter_catalog.h) and is generated
// while the file is written, one tensor in memory at a time. Values depend only on (seed,
// component, tensor name, element index), so both layouts hold the same model.
#include "cli/random_model_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/single_file.h"
#include "models/configs.h"
#include "models/parameter_catalog.h"
#include "models/random_weights.h"

namespace octodiff {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char kUsage[] =
    "  octodiff-cli make-random-model --arch sd15|sd21|sd21-base|lcm-sd15|sd-turbo|sdxl|sdxl-turbo|taesd|\n"
    "                                 controlnet-sd15|controlnet-sdxl\n"
    "                                 --layout diffusers|single-file --out DIR [--dtype f32|f16|bf16]\n"
    "                                 [--seed N] [--tokenizer-from DIR] [--configs-only]\n"
    "      write a full-size model with deterministic random weights (benchmarks only: it draws noise).\n"
    "      --arch: sd15, sd21 (768-v), sd21-base; lcm-sd15 (an LCM-distilled SD 1.5 UNet:\n"
    "      time_cond_proj_dim 256, LCMScheduler; diffusers layout only); sd-turbo (SD 2.1 at 512x512,\n"
    "      epsilon, EulerDiscreteScheduler with trailing timesteps); controlnet-sd15 (a ControlNetModel for\n"
    "      SD 1.5, lllyasviel's sd-controlnet architecture; diffusers layout: DIR/config.json + weights);\n"
    "      controlnet-sdxl (the same for SDXL base: diffusers/controlnet-canny-sdxl-1.0's architecture);\n"
    "      sdxl (stable-diffusion-xl-base-1.0: both text towers, text_time UNet, EulerDiscreteScheduler;\n"
    "      with text_encoder_2/ and tokenizer_2/, or conditioner.embedders.0/1 in a single file); sdxl-turbo\n"
    "      (SDXL at 512x512, EulerAncestralDiscreteScheduler with trailing timesteps; diffusers layout only).\n"
    "      diffusers: DIR/{model_index.json,unet,vae,text_encoder,scheduler,tokenizer}/;\n"
    "      single-file: DIR/model.safetensors (ldm keys) and DIR/tokenizer/ (SDXL: and DIR/tokenizer_2/).\n"
    "      DIR must be new or empty.\n"
    "      --dtype f32 (default) | f16 | bf16; --seed (default 0);\n"
    "      --tokenizer-from: a CLIP tokenizer folder to copy (default: the source tree's\n"
    "      tests/data/tiny-sd/tokenizer, a small vocabulary; no real CLIP vocabulary is shipped);\n"
    "      --configs-only: write the config files, tokenizer and README but no weights (a quick look at\n"
    "      what an architecture is; the folder does not load).\n";

// ---- Scheduler configs (key sets of diffusers 0.31's save_pretrained) ----

// SD v1.x's PNDM config (spec schedulers.md §0); SD2 configs add their prediction type.
json pndm_scheduler(const char* prediction_type) {
  json j = {{"_class_name", "PNDMScheduler"},
            {"_diffusers_version", "0.31.0"},
            {"beta_end", 0.012},
            {"beta_schedule", "scaled_linear"},
            {"beta_start", 0.00085},
            {"clip_sample", false},
            {"num_train_timesteps", 1000},
            {"set_alpha_to_one", false},
            {"skip_prk_steps", true},
            {"steps_offset", 1},
            {"trained_betas", nullptr}};
  if (prediction_type) j["prediction_type"] = prediction_type;
  return j;
}

// LCM-Dreamshaper-v7's LCMScheduler settings (spec fast-sampling.md §1).
json lcm_scheduler() {
  return {{"_class_name", "LCMScheduler"},
          {"_diffusers_version", "0.31.0"},
          {"beta_end", 0.012},
          {"beta_schedule", "scaled_linear"},
          {"beta_start", 0.00085},
          {"clip_sample", false},
          {"clip_sample_range", 1.0},
          {"dynamic_thresholding_ratio", 0.995},
          {"num_train_timesteps", 1000},
          {"original_inference_steps", 50},
          {"prediction_type", "epsilon"},
          {"rescale_betas_zero_snr", false},
          {"sample_max_value", 1.0},
          {"set_alpha_to_one", true},
          {"steps_offset", 1},
          {"thresholding", false},
          {"timestep_scaling", 10.0},
          {"timestep_spacing", "leading"},
          {"trained_betas", nullptr}};
}

// SD-Turbo's scheduler (spec fast-sampling.md §2): Euler, epsilon, trailing timesteps, offset 1.
json turbo_euler_scheduler() {
  return {{"_class_name", "EulerDiscreteScheduler"},
          {"_diffusers_version", "0.31.0"},
          {"beta_end", 0.012},
          {"beta_schedule", "scaled_linear"},
          {"beta_start", 0.00085},
          {"final_sigmas_type", "zero"},
          {"interpolation_type", "linear"},
          {"num_train_timesteps", 1000},
          {"prediction_type", "epsilon"},
          {"rescale_betas_zero_snr", false},
          {"sigma_max", nullptr},
          {"sigma_min", nullptr},
          {"steps_offset", 1},
          {"timestep_spacing", "trailing"},
          {"timestep_type", "discrete"},
          {"trained_betas", nullptr},
          {"use_beta_sigmas", false},
          {"use_exponential_sigmas", false},
          {"use_karras_sigmas", false}};
}

// stable-diffusion-xl-base-1.0's scheduler: Euler, epsilon, leading timesteps, offset 1.
json sdxl_euler_scheduler() {
  return {{"_class_name", "EulerDiscreteScheduler"},
          {"_diffusers_version", "0.31.0"},
          {"beta_end", 0.012},
          {"beta_schedule", "scaled_linear"},
          {"beta_start", 0.00085},
          {"clip_sample", false},
          {"interpolation_type", "linear"},
          {"num_train_timesteps", 1000},
          {"prediction_type", "epsilon"},
          {"sample_max_value", 1.0},
          {"set_alpha_to_one", false},
          {"skip_prk_steps", true},
          {"steps_offset", 1},
          {"timestep_spacing", "leading"},
          {"trained_betas", nullptr},
          {"use_karras_sigmas", false}};
}

// stabilityai/sdxl-turbo's scheduler: Euler ancestral, epsilon, trailing timesteps, offset 1
// (spec fast-sampling.md §2: 1-4 steps at guidance 0; one step adds no noise).
json sdxl_turbo_scheduler() {
  json j = sdxl_euler_scheduler();
  j["_class_name"] = "EulerAncestralDiscreteScheduler";
  j["timestep_spacing"] = "trailing";
  return j;
}

// ---- Architectures ----

struct Arch {
  std::string name;
  SingleFileCheckpoint::Family family;
  ClipTextConfig text;
  UNetConfig unet;
  VaeConfig vae;
  json scheduler;  // scheduler/scheduler_config.json
  std::string pipeline_class;
  std::string title;
  // The ldm layout: whether it exists for this architecture, and the `global_step` its file
  // carries (readers take SD2 files without one for 768-v models; 875000 marks 2-base).
  bool single_file = true;
  std::optional<int64_t> ldm_global_step;
  // SDXL: the second text tower (CLIPTextModelWithProjection, text_encoder_2/ + tokenizer_2/).
  std::optional<ClipTextConfig> text_2;
};

UNetConfig lcm_unet() {
  UNetConfig c = UNetConfig::sd1();
  c.time_cond_proj_dim = 256;
  return c;
}

VaeConfig vae_at(int sample_size) {
  VaeConfig c = VaeConfig::sd();
  c.sample_size = sample_size;
  return c;
}

// SDXL-Turbo: SDXL's networks with a UNet sample size of 64 (512 × 512 images by default).
UNetConfig sdxl_turbo_unet() {
  UNetConfig c = UNetConfig::sdxl();
  c.sample_size = 64;
  return c;
}

VaeConfig sdxl_turbo_vae() {
  VaeConfig c = VaeConfig::sdxl();
  c.sample_size = 512;
  return c;
}

std::vector<Arch> architectures() {
  using F = SingleFileCheckpoint::Family;
  const char* sd = "StableDiffusionPipeline";
  return {
      {"sd15", F::SD1, ClipTextConfig::sd1(), UNetConfig::sd1(), vae_at(512), pndm_scheduler(nullptr), sd,
       "Stable Diffusion 1.5", true, std::nullopt, std::nullopt},
      {"sd21", F::SD2, ClipTextConfig::sd2(), UNetConfig::sd2(true), vae_at(768),
       pndm_scheduler("v_prediction"), sd, "Stable Diffusion 2.1 (768-v)", true, std::nullopt, std::nullopt},
      {"sd21-base", F::SD2, ClipTextConfig::sd2(), UNetConfig::sd2(false), vae_at(512),
       pndm_scheduler("epsilon"), sd, "Stable Diffusion 2.1-base", true, 875000, std::nullopt},
      // diffusers' single-file converter has no ldm name for time_embedding.cond_proj.
      {"lcm-sd15", F::SD1, ClipTextConfig::sd1(), lcm_unet(), vae_at(512), lcm_scheduler(),
       "LatentConsistencyModelPipeline",
       "LCM-distilled Stable Diffusion 1.5 (LCM-Dreamshaper-v7 architecture)", false, std::nullopt,
       std::nullopt},
      {"sd-turbo", F::SD2, ClipTextConfig::sd2(), UNetConfig::sd2(false), vae_at(512),
       turbo_euler_scheduler(), sd, "SD-Turbo (Stable Diffusion 2.1 architecture at 512x512, epsilon)", true,
       875000, std::nullopt},
      {"sdxl", F::SDXL, ClipTextConfig::sd1(), UNetConfig::sdxl(), VaeConfig::sdxl(), sdxl_euler_scheduler(),
       "StableDiffusionXLPipeline", "Stable Diffusion XL base 1.0", true, std::nullopt,
       ClipTextConfig::sdxl_bigg()},
      {"sdxl-turbo", F::SDXL, ClipTextConfig::sd1(), sdxl_turbo_unet(), sdxl_turbo_vae(),
       sdxl_turbo_scheduler(), "StableDiffusionXLPipeline",
       "SDXL-Turbo (Stable Diffusion XL architecture at 512x512, Euler ancestral)", false, std::nullopt,
       ClipTextConfig::sdxl_bigg()},
  };
}

Arch arch_named(const std::string& name) {
  std::string names;
  for (const Arch& a : architectures()) {
    if (a.name == name) return a;
    names += (names.empty() ? "" : ", ") + a.name;
  }
  fail("unknown --arch '", name, "' (use ", names, ", taesd, controlnet-sd15 or controlnet-sdxl)");
}

DType dtype_named(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  fail("unknown --dtype '", s, "' (use f32, f16 or bf16)");
}

const char* torch_dtype(DType t) {
  return t == DType::F32 ? "float32" : t == DType::F16 ? "float16" : "bfloat16";
}

// ---- Config files (key sets of diffusers 0.31 / transformers 4.48, as in tests/data/tiny-sd) ----

json text_encoder_config(const ClipTextConfig& c, DType dtype, bool with_projection = false) {
  return {{"architectures", {with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
          {"attention_dropout", 0.0},
          {"bos_token_id", 0},
          {"eos_token_id", 2},
          {"hidden_act", c.hidden_act},
          {"hidden_size", c.hidden_size},
          {"initializer_factor", 1.0},
          {"initializer_range", 0.02},
          {"intermediate_size", c.intermediate_size},
          {"layer_norm_eps", c.layer_norm_eps},
          {"max_position_embeddings", c.max_position_embeddings},
          {"model_type", "clip_text_model"},
          {"num_attention_heads", c.num_attention_heads},
          {"num_hidden_layers", c.num_hidden_layers},
          {"pad_token_id", 1},
          {"projection_dim", with_projection ? c.projection_dim : c.hidden_size == 1024 ? 512 : 768},
          {"torch_dtype", torch_dtype(dtype)},
          {"transformers_version", "4.48.0.dev0"},
          {"vocab_size", c.vocab_size}};
}

json unet_config(const UNetConfig& c, bool sd2) {
  json heads = sd2 || c.text_time() ? json(c.num_heads) : json(c.num_heads[0]);
  auto or_null = [](int v) { return v > 0 ? json(v) : json(nullptr); };
  const bool one_layer = std::all_of(c.transformer_layers_per_block.begin(), c.transformer_layers_per_block.end(),
                                     [](int d) { return d == 1; });
  return {{"_class_name", "UNet2DConditionModel"},
          {"_diffusers_version", "0.31.0"},
          {"act_fn", "silu"},
          {"addition_embed_type", c.text_time() ? json(c.addition_embed_type) : json(nullptr)},
          {"addition_embed_type_num_heads", 64},
          {"addition_time_embed_dim", or_null(c.addition_time_embed_dim)},
          {"attention_head_dim", heads},
          {"attention_type", "default"},
          {"block_out_channels", c.block_out_channels},
          {"center_input_sample", false},
          {"class_embed_type", nullptr},
          {"class_embeddings_concat", false},
          {"conv_in_kernel", 3},
          {"conv_out_kernel", 3},
          {"cross_attention_dim", c.cross_attention_dim},
          {"cross_attention_norm", nullptr},
          {"down_block_types", c.down_block_types},
          {"downsample_padding", c.downsample_padding},
          {"dropout", 0.0},
          {"dual_cross_attention", false},
          {"encoder_hid_dim", nullptr},
          {"encoder_hid_dim_type", nullptr},
          {"flip_sin_to_cos", c.flip_sin_to_cos},
          {"freq_shift", 0},
          {"in_channels", c.in_channels},
          {"layers_per_block", c.layers_per_block},
          {"mid_block_only_cross_attention", nullptr},
          {"mid_block_scale_factor", 1},
          {"mid_block_type", "UNetMidBlock2DCrossAttn"},
          {"norm_eps", c.norm_eps},
          {"norm_num_groups", c.norm_num_groups},
          {"num_attention_heads", nullptr},
          {"num_class_embeds", nullptr},
          {"only_cross_attention", false},
          {"out_channels", c.out_channels},
          {"projection_class_embeddings_input_dim", or_null(c.projection_class_embeddings_input_dim)},
          {"resnet_out_scale_factor", 1.0},
          {"resnet_skip_time_act", false},
          {"resnet_time_scale_shift", "default"},
          {"reverse_transformer_layers_per_block", nullptr},
          {"sample_size", c.sample_size},
          {"time_cond_proj_dim", c.time_cond_proj_dim > 0 ? json(c.time_cond_proj_dim) : json(nullptr)},
          {"time_embedding_act_fn", nullptr},
          {"time_embedding_dim", nullptr},
          {"time_embedding_type", "positional"},
          {"timestep_post_act", nullptr},
          {"transformer_layers_per_block", one_layer ? json(1) : json(c.transformer_layers_per_block)},
          {"up_block_types", c.up_block_types},
          {"upcast_attention", c.upcast_attention},
          {"use_linear_projection", c.use_linear_projection}};
}

json vae_config(const VaeConfig& c) {
  const size_t n = c.block_out_channels.size();
  return {{"_class_name", "AutoencoderKL"},
          {"_diffusers_version", "0.31.0"},
          {"act_fn", "silu"},
          {"block_out_channels", c.block_out_channels},
          {"down_block_types", std::vector<std::string>(n, "DownEncoderBlock2D")},
          {"force_upcast", true},
          {"in_channels", c.in_channels},
          {"latent_channels", c.latent_channels},
          {"latents_mean", nullptr},
          {"latents_std", nullptr},
          {"layers_per_block", c.layers_per_block},
          {"mid_block_add_attention", c.mid_block_add_attention},
          {"norm_num_groups", c.norm_num_groups},
          {"out_channels", c.out_channels},
          {"sample_size", c.sample_size},
          {"scaling_factor", c.scaling_factor},
          {"shift_factor", nullptr},
          {"up_block_types", std::vector<std::string>(n, "UpDecoderBlock2D")},
          {"use_post_quant_conv", c.use_post_quant_conv},
          {"use_quant_conv", c.use_quant_conv}};
}

json model_index(const Arch& a) {
  if (a.text_2)  // StableDiffusionXLPipeline's components (no safety checker)
    return {{"_class_name", a.pipeline_class},
            {"_diffusers_version", "0.31.0"},
            {"feature_extractor", {nullptr, nullptr}},
            {"force_zeros_for_empty_prompt", true},
            {"image_encoder", {nullptr, nullptr}},
            {"scheduler", {"diffusers", a.scheduler["_class_name"]}},
            {"text_encoder", {"transformers", "CLIPTextModel"}},
            {"text_encoder_2", {"transformers", "CLIPTextModelWithProjection"}},
            {"tokenizer", {"transformers", "CLIPTokenizer"}},
            {"tokenizer_2", {"transformers", "CLIPTokenizer"}},
            {"unet", {"diffusers", "UNet2DConditionModel"}},
            {"vae", {"diffusers", "AutoencoderKL"}}};
  return {{"_class_name", a.pipeline_class},
          {"_diffusers_version", "0.31.0"},
          {"feature_extractor", {nullptr, nullptr}},
          {"image_encoder", {nullptr, nullptr}},
          {"requires_safety_checker", false},
          {"safety_checker", {nullptr, nullptr}},
          {"scheduler", {"diffusers", a.scheduler["_class_name"]}},
          {"text_encoder", {"transformers", "CLIPTextModel"}},
          {"tokenizer", {"transformers", "CLIPTokenizer"}},
          {"unet", {"diffusers", "UNet2DConditionModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

void write_json(const fs::path& path, const json& j) {
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path, text.data(), text.size());
}

// ---- Tokenizer ----

fs::path default_tokenizer_dir() {
  return fs::path(OCTODIFF_RESOURCE_DIR).parent_path() / "tests" / "data" / "tiny-sd" / "tokenizer";
}

// Copies the tokenizer files; SD2 tokenizers pad with "!" (spec tokenizer.md §1). Returns the
// vocabulary size.
void check_tokenizer_dir(const fs::path& from) {
  for (const char* f : {"vocab.json", "merges.txt"})
    if (!fs::is_regular_file(from / f))
      fail("'", from.string(), "' is not a CLIP tokenizer folder (no ", f, "); pass --tokenizer-from DIR");
}

size_t copy_tokenizer(const fs::path& from, const fs::path& to, bool sd2, int64_t embedding_rows) {
  check_tokenizer_dir(from);
  json vocab = json::parse(read_text_file(from / "vocab.json"));
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  if (max_id >= embedding_rows)
    fail("the tokenizer in '", from.string(), "' has ids up to ", max_id, ", more than the model's ",
         embedding_rows, " token embeddings");
  fs::create_directories(to);
  for (const auto& entry : fs::directory_iterator(from)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    std::string text = read_text_file(entry.path());
    if (sd2 && (name == "special_tokens_map.json" || name == "tokenizer_config.json")) {
      json j = json::parse(text);
      if (vocab.contains("!")) j["pad_token"] = "!";
      text = j.dump(2) + "\n";
    }
    write_file_atomic(to / name, text.data(), text.size());
  }
  return vocab.size();
}

// ---- Weights ----

// The metadata of every weights file make-random-model writes.
std::map<std::string, std::string> weights_metadata(uint64_t seed) {
  return {{"format", "pt"},
          {"octodiff", "random weights for benchmarks (make-random-model, seed " + std::to_string(seed) + ")"}};
}

void write_component(const fs::path& path, const std::vector<DiffusersTensor>& tensors, DType dtype,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> list;
  for (const auto& t : tensors)
    list.push_back({t.name, dtype, t.shape, [&t, dtype](uint8_t* dst, size_t) {
                      if (dtype == DType::F32) return t.values(reinterpret_cast<float*>(dst));
                      std::vector<float> values(shape_numel(t.shape));
                      t.values(values.data());
                      store_floats(values.data(), static_cast<int64_t>(values.size()), dtype, dst);
                    }});
  write_safetensors(path, list, metadata);
}

std::string readme(const Arch& a, const std::string& layout, DType dtype, uint64_t seed,
                   const fs::path& tokenizer, size_t vocab, int64_t unet, int64_t vae, int64_t text,
                   const std::string& command) {
  return cat(
      "# Random-weight ", a.title, "\n\n",
      "**Random weights, for benchmarks only.** This model draws noise, not pictures.\n\n",
      "- Architecture: ", a.title, " at full size — UNet ", unet, " parameters, VAE ", vae, ", text encoder ",
      text, "; stored as ", dtype_name(dtype), ".\n", "- Layout: ",
      layout == "diffusers"
          ? "diffusers folder (model_index.json, unet/, vae/, text_encoder/, scheduler/, "
            "tokenizer/)"
          : "single file `model.safetensors` with original (ldm) keys, tokenizer/ beside it",
      ".\n", "- Weights: deterministic synthetic values (seed ", seed,
      "): weights ~ N(0, 1/fan_in) (Irwin-Hall approximation), biases 0.01*N(0,1), embeddings "
      "0.02*N(0,1), norm scales 1, norm shifts 0.\n",
      layout == "diffusers"
          ? cat("- Scheduler: ", a.scheduler["_class_name"].get<std::string>(), " (scheduler/scheduler_config.json)",
                a.unet.time_cond_proj_dim > 0
                    ? cat("; the UNet is LCM-distilled (time_cond_proj_dim ", a.unet.time_cond_proj_dim,
                          ": it takes the guidance embedding)")
                    : std::string(),
                ".\n")
          : std::string(),
      "- Tokenizer: copied from `", tokenizer.string(), "` (", vocab, " entries). It is NOT the real CLIP ",
      "vocabulary (49408 entries), which is not shipped; its ids are valid rows of the 49408-row token "
      "embedding, so prompts tokenize, but to other ids than with real Stable Diffusion.\n",
      a.text_2 ? "- Second text encoder (CLIPTextModelWithProjection: text_encoder_2/, or conditioner.embedders.1 in "
                 "the single file) and tokenizer_2/ (the same "
                 "vocabulary, padded with \"!\" as SDXL's).\n"
               : "",
      "- Made by: `", command, "`\n");
}

// ---- The tiny autoencoder (TAESD) ----

// madebyollin/taesd's config.json in the key set of diffusers 0.31's save_pretrained (as in
// tests/data/tiny-taesd): 64 channels, blocks [1,3,3,3] / [3,3,3,1], 4 latent channels.
json taesd_config(const AutoencoderTinyConfig& c) {
  return {{"_class_name", "AutoencoderTiny"},
          {"_diffusers_version", "0.31.0"},
          {"act_fn", "relu"},
          {"block_out_channels", c.decoder_block_out_channels},
          {"decoder_block_out_channels", c.decoder_block_out_channels},
          {"encoder_block_out_channels", c.encoder_block_out_channels},
          {"force_upcast", false},
          {"in_channels", c.in_channels},
          {"latent_channels", c.latent_channels},
          {"latent_magnitude", c.latent_magnitude},
          {"latent_shift", c.latent_shift},
          {"num_decoder_blocks", c.num_decoder_blocks},
          {"num_encoder_blocks", c.num_encoder_blocks},
          {"out_channels", c.out_channels},
          {"scaling_factor", c.scaling_factor},
          {"shift_factor", 0.0},
          {"upsample_fn", "nearest"},
          {"upsampling_scaling_factor", c.upsampling_scaling_factor}};
}

// A diffusers AutoencoderTiny folder with TAESD's config and random weights (both halves).
int write_random_taesd(const fs::path& out, DType dtype, uint64_t seed, bool configs_only, const std::string& command) {
  const AutoencoderTinyConfig config;  // TAESD's defaults (models/configs.h)
  fs::create_directories(out);
  write_json(out / "config.json", taesd_config(config));
  const auto specs = autoencoder_tiny_parameters(config, /*with_encoder=*/true);
  const fs::path file = out / "diffusion_pytorch_model.safetensors";
  if (!configs_only)
    write_component(file, random_tensors(specs, component_seed(seed, 4)), dtype, weights_metadata(seed));
  const std::string notes = cat(
      configs_only ? "**Configs only: no weights were written; this folder does not load.**\n\n" : "",
      "# Random-weight tiny autoencoder (TAESD architecture)\n\n",
      "**Random weights, for benchmarks only.** It decodes latents to noise, not pictures.\n\n",
      "- Architecture: diffusers AutoencoderTiny with madebyollin/taesd's config (64 channels, encoder blocks ",
      json(config.num_encoder_blocks).dump(), ", decoder blocks ", json(config.num_decoder_blocks).dump(), ", ",
      config.latent_channels, " latent channels) — ", parameter_count(specs), " parameters, encoder and decoder; stored as ",
      dtype_name(dtype), ".\n",
      "- Weights: deterministic synthetic values (seed ", seed, "), as for make-random-model's other models.\n",
      "- Made by: `", command, "`\n");
  write_file_atomic(out / "README.md", notes.data(), notes.size());
  std::printf("random TAESD (%lld parameters, %s) in '%s'\n", static_cast<long long>(parameter_count(specs)),
              configs_only ? "configs only" : dtype_name(dtype), out.string().c_str());
  return 0;
}

// A diffusers ControlNetModel folder with random weights for SD 1.5 (lllyasviel/sd-controlnet-*'s
// config) or SDXL base (diffusers/controlnet-canny-sdxl-1.0's).
int write_random_controlnet(const fs::path& out, DType dtype, uint64_t seed, bool configs_only, const std::string& command,
                            bool sdxl) {
  ControlNetConfig config;
  config.unet = sdxl ? UNetConfig::sdxl() : UNetConfig::sd1();
  const char* family = sdxl ? "SDXL" : "SD 1.5";
  json j = unet_config(config.unet, false);
  j["_class_name"] = "ControlNetModel";
  for (const char* k : {"up_block_types", "out_channels", "sample_size", "center_input_sample", "conv_out_kernel",
                        "time_cond_proj_dim", "reverse_transformer_layers_per_block"})
    j.erase(k);
  j["conditioning_channels"] = config.conditioning_channels;
  j["conditioning_embedding_out_channels"] = config.conditioning_embedding_out_channels;
  j["controlnet_conditioning_channel_order"] = "rgb";
  j["global_pool_conditions"] = false;
  fs::create_directories(out);
  write_json(out / "config.json", j);
  const auto specs = controlnet_parameters(config);
  if (!configs_only)
    write_component(out / "diffusion_pytorch_model.safetensors", random_tensors(specs, component_seed(seed, 5)), dtype,
                    weights_metadata(seed));
  const std::string notes = cat(
      configs_only ? "**Configs only: no weights were written; this folder does not load.**\n\n" : "",
      "# Random-weight ControlNet (", family, " architecture)\n\n**Random weights, for benchmarks only.**\n\n",
      "- Architecture: diffusers ControlNetModel for ", family, " (", config.num_down_residuals(),
      " down residuals + 1 mid), ", parameter_count(specs), " parameters, stored as ", dtype_name(dtype), ".\n",
      "- Made by: `", command, "`\n");
  write_file_atomic(out / "README.md", notes.data(), notes.size());
  std::printf("random ControlNet (%lld parameters, %s) in '%s'\n", static_cast<long long>(parameter_count(specs)),
              configs_only ? "configs only" : dtype_name(dtype), out.string().c_str());
  return 0;
}

// The command line as given: option → value (--dtype and --seed defaulted), and the command
// again for the README.
struct GivenOptions {
  std::map<std::string, std::string> opt = {{"--dtype", "f32"}, {"--seed", "0"}};
  std::string command = "octodiff-cli make-random-model";
  bool configs_only = false;
};

// Reads --key value, --key=value and --configs-only; a value missing, an unknown option or a
// required one absent is said with the usage on stderr, and gives nullopt (exit status 2).
std::optional<GivenOptions> read_options(const std::vector<std::string>& args) {
  GivenOptions g;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string key = args[i], value;
    if (key == "--configs-only") {
      g.configs_only = true;
      g.command += " " + key;
      continue;
    }
    const size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      std::fprintf(stderr, "make-random-model: %s needs a value\n\nusage:\n%s", key.c_str(), kUsage);
      return std::nullopt;
    }
    if (key != "--arch" && key != "--layout" && key != "--out" && key != "--dtype" && key != "--seed" &&
        key != "--tokenizer-from") {
      std::fprintf(stderr, "make-random-model: unknown option '%s'\n\nusage:\n%s", key.c_str(), kUsage);
      return std::nullopt;
    }
    g.opt[key] = value;
    g.command += " " + key + " " + value;
  }
  for (const char* required : {"--arch", "--layout", "--out"})
    if (!g.opt.count(required)) {
      std::fprintf(stderr, "make-random-model: %s is required\n\nusage:\n%s", required, kUsage);
      return std::nullopt;
    }
  return g;
}

// What to write, checked (make-random-model's options).
struct RandomModelRequest {
  std::string arch;    // --arch: an Arch's name, taesd, controlnet-sd15 or controlnet-sdxl
  std::string layout;  // diffusers or single-file
  fs::path out;        // a new or empty folder
  DType dtype = DType::F32;
  uint64_t seed = 0;
  std::optional<fs::path> tokenizer_from;  // --tokenizer-from (default: default_tokenizer_dir())
  bool configs_only = false;
  std::string command;  // the command line, for the README
  bool taesd() const { return arch == "taesd"; }
  bool controlnet_xl() const { return arch == "controlnet-sdxl"; }
  bool controlnet() const { return arch == "controlnet-sd15" || controlnet_xl(); }
};

// --seed as a non-negative integer.
uint64_t parse_seed(const std::string& text) {
  try {
    if (text.empty() || text[0] == '-') throw std::invalid_argument("negative");
    size_t used = 0;
    const uint64_t seed = std::stoull(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    return seed;
  } catch (const std::exception&) {
    fail("--seed must be a non-negative integer, got '", text, "'");
  }
}

// The layouts each --arch has, --dtype, --seed and --out checked (Error for the user).
RandomModelRequest checked_request(GivenOptions g) {
  RandomModelRequest r;
  r.arch = g.opt["--arch"];
  r.layout = g.opt["--layout"];
  r.configs_only = g.configs_only;
  r.command = g.command;
  if (r.layout != "diffusers" && r.layout != "single-file")
    fail("unknown --layout '", r.layout, "' (use diffusers or single-file)");
  if (r.taesd() && r.layout != "diffusers")
    fail("--arch taesd writes a diffusers AutoencoderTiny folder only; use --layout diffusers");
  if (r.controlnet() && r.layout != "diffusers")
    fail("--arch ", r.arch, " writes a diffusers ControlNetModel folder only; use --layout diffusers");
  if (r.layout == "single-file" && r.configs_only)
    fail("--configs-only writes a diffusers folder's configs; use --layout diffusers");
  r.dtype = dtype_named(g.opt["--dtype"]);
  r.seed = parse_seed(g.opt["--seed"]);
  r.out = g.opt["--out"];
  if (fs::exists(r.out) && (!fs::is_directory(r.out) || !fs::is_empty(r.out)))
    fail("'", r.out.string(), "' already exists and is not an empty folder; choose a new --out");
  if (g.opt.count("--tokenizer-from")) r.tokenizer_from = g.opt["--tokenizer-from"];
  return r;
}

// A diffusers folder's configs: model_index.json and each component's config.
void write_diffusers_configs(const fs::path& out, const Arch& arch, DType dtype) {
  for (const char* dir : {"unet", "vae", "text_encoder", "scheduler"}) fs::create_directories(out / dir);
  write_json(out / "model_index.json", model_index(arch));
  write_json(out / "scheduler" / "scheduler_config.json", arch.scheduler);
  write_json(out / "unet" / "config.json", unet_config(arch.unet, arch.family == SingleFileCheckpoint::Family::SD2));
  write_json(out / "vae" / "config.json", vae_config(arch.vae));
  write_json(out / "text_encoder" / "config.json", text_encoder_config(arch.text, dtype));
  if (arch.text_2) {
    fs::create_directories(out / "text_encoder_2");
    write_json(out / "text_encoder_2" / "config.json", text_encoder_config(*arch.text_2, dtype, true));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A diffusers folder's weights files, each said with its size and the time since t0.
void write_diffusers_weights(const fs::path& out, const Arch& arch, const RandomModelWeights& weights, DType dtype,
                             uint64_t seed, std::chrono::steady_clock::time_point t0) {
  struct Part {
    const char* label;
    fs::path file;
    const std::vector<DiffusersTensor>* tensors;
  };
  std::vector<Part> parts{Part{"text_encoder", out / "text_encoder" / "model.safetensors", &weights.text_encoder},
                          Part{"vae", out / "vae" / "diffusion_pytorch_model.safetensors", &weights.vae},
                          Part{"unet", out / "unet" / "diffusion_pytorch_model.safetensors", &weights.unet}};
  if (arch.text_2)
    parts.insert(parts.begin() + 1,
                 Part{"text_encoder_2", out / "text_encoder_2" / "model.safetensors", &weights.text_encoder_2});
  for (const Part& p : parts) {
    write_component(p.file, *p.tensors, dtype, weights_metadata(seed));
    std::printf("wrote %-12s %6.2f GB  (%.1f s)\n", p.label, fs::file_size(p.file) / 1e9, seconds_since(t0));
    std::fflush(stdout);
  }
}

// A Stable Diffusion model of one of architectures() (not taesd or a ControlNet) in r.out.
int write_random_sd_model(const RandomModelRequest& r) {
  const Arch arch = arch_named(r.arch);
  if (r.layout == "single-file" && !arch.single_file)
    fail("--arch ", arch.name, " has no single-file (ldm) layout",
         ": diffusers' converter names no ldm key for its time_embedding.cond_proj", "; use --layout diffusers");
  const fs::path tokenizer_from = r.tokenizer_from ? *r.tokenizer_from : default_tokenizer_dir();
  check_tokenizer_dir(tokenizer_from);
  OutputFolder folder(r.out);

  const auto t0 = std::chrono::steady_clock::now();
  const auto unet_specs = unet_parameters(arch.unet);
  const auto vae_specs = vae_parameters(arch.vae);
  const auto text_specs = clip_text_parameters(arch.text);
  const RandomModelWeights weights =
      random_model_weights(arch.unet, arch.vae, arch.text, arch.text_2 ? &*arch.text_2 : nullptr, r.seed);

  const size_t vocab = copy_tokenizer(tokenizer_from, r.out / "tokenizer",
                                      arch.family == SingleFileCheckpoint::Family::SD2, arch.text.vocab_size);
  if (arch.text_2)  // beside tokenizer/ in both layouts (a single SDXL file's loader looks there)
    copy_tokenizer(tokenizer_from, r.out / "tokenizer_2", /*sd2 ("!" padding)=*/true, arch.text_2->vocab_size);
  const std::string about = readme(arch, r.layout, r.dtype, r.seed, tokenizer_from, vocab, parameter_count(unet_specs),
                                   parameter_count(vae_specs), parameter_count(text_specs), r.command);
  if (r.layout == "diffusers") {
    write_diffusers_configs(r.out, arch, r.dtype);
    if (r.configs_only) {
      const std::string notes = "**Configs only: no weights were written; this folder does not load.**\n\n" + about;
      write_file_atomic(r.out / "README.md", notes.data(), notes.size());
      folder.keep();
      std::printf("%s configs (no weights) in '%s'\n", arch.title.c_str(), r.out.string().c_str());
      return 0;
    }
    write_diffusers_weights(r.out, arch, weights, r.dtype, r.seed, t0);
  } else {
    SingleFileContents contents = random_single_file_contents(weights, arch.family, r.seed, arch.ldm_global_step);
    contents.metadata = weights_metadata(r.seed);
    write_single_file(r.out / "model.safetensors", contents, r.dtype);
    std::printf("wrote model.safetensors %6.2f GB  (%.1f s)\n", fs::file_size(r.out / "model.safetensors") / 1e9,
                seconds_since(t0));
  }
  write_file_atomic(r.out / "README.md", about.data(), about.size());
  folder.keep();
  std::printf("%s random model (%s, %s) in '%s' after %.1f s\n", arch.title.c_str(), r.layout.c_str(),
              dtype_name(r.dtype), r.out.string().c_str(), seconds_since(t0));
  return 0;
}

}  // namespace

const char* make_random_model_usage() {
  return kUsage;
}

int run_make_random_model(const std::vector<std::string>& args) {
  const std::optional<GivenOptions> given = read_options(args);
  if (!given) return 2;
  const RandomModelRequest r = checked_request(*given);
  if (!r.taesd() && !r.controlnet()) return write_random_sd_model(r);
  OutputFolder folder(r.out);  // a model that fails part-way (full disk) leaves nothing behind
  const int status = r.taesd() ? write_random_taesd(r.out, r.dtype, r.seed, r.configs_only, r.command)
                               : write_random_controlnet(r.out, r.dtype, r.seed, r.configs_only, r.command,
                                                         r.controlnet_xl());
  folder.keep();
  return status;
}

}  // namespace octodiff
