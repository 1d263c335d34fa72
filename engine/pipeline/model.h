// StableDiffusionModel: everything one checkpoint provides — tokenizer, text encoder, UNet, VAE and
// the scheduler configuration — loaded once and then shared read-only by every device of every
// run (the Flax pipeline's "replicated params": replication costs nothing on one host).
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "models/autoencoder_kl.h"
#include "models/autoencoder_tiny.h"
#include "models/clip_text_model.h"
#include "models/clip_text_projection.h"
#include "models/layers.h"
#include "models/unet_2d_condition.h"
#include "pipeline/generation.h"
#include "pipeline/lora.h"
#include "pipeline/safety_check.h"
#include "schedulers/scheduler.h"
#include "text/clip_tokenizer.h"

namespace octodiff {

// What happens to a network's packed weights (mapped from the weight cache) once its phase of a
// run is over:
//   Minimal  — dropped from memory (the pages stay in the page cache and come back on the next
//              use): only one network is resident at a time, the smallest peak RSS; the next
//              run's first UNet call pays for paging the UNet back in.
//   Resident — kept: every network stays resident across phases and runs once used, so the
//              first call of a run is as fast as the others, at the cost of every network's
//              weights in RSS. The pipeline's activation arenas then keep their slabs too
//              (ShardedPipeline, "Activation memory").
//   Auto     — Resident when the weights of all networks together take at most
//              kResidentWeightsFractionOfRam of the machine's physical memory, else Minimal
//              (auto_weight_residency): on 24 GiB SD 1.x/2.x in either dtype stay resident, SDXL
//              (8.3 GB packed with a bf16 UNet, 13.4 GB in f32) does not; on a 16 GB laptop only
//              SD 1.x/2.x in bf16 do. Half the RAM was measured and not kept: SDXL bf16 would stay
//              resident on 24 GiB (a one-step 512² image 1.10 × faster, medians) but peak at 9.9 GB
//              already at 512², over issue 23's 8 GB bar for bf16 SDXL; OCTODIFF_WEIGHT_RESIDENCY=
//              resident asks for it (bench/results, session 27).
enum class WeightResidency { Auto, Minimal, Resident };
constexpr double kResidentWeightsFractionOfRam = 0.25;
// What Auto decides for `weight_bytes` of packed weights on a machine with `ram_bytes`.
WeightResidency auto_weight_residency(uint64_t weight_bytes, double ram_bytes);
WeightResidency parse_weight_residency(const std::string& name);  // "auto", "minimal", "resident"
std::string weight_residency_name(WeightResidency r);

struct ModelLoadOptions {
  // A folder with vocab.json + merges.txt. Required for single-file checkpoints (they carry no
  // vocabulary) unless a tokenizer/ folder sits beside the file; overrides a diffusers folder's own.
  std::optional<std::filesystem::path> tokenizer_dir;
  // "fp16" to prefer diffusers' *.fp16.safetensors variant files; empty = the plain files, falling
  // back to a variant when that is all the folder has.
  std::string variant;
  // A diffusers folder whose components hold both safetensors and Flax msgpack weights
  // (diffusion_flax_model.msgpack, flax_model.msgpack) loads the safetensors unless this is set;
  // a component with only Flax weights loads them either way.
  bool prefer_flax = false;
  bool load_vae_encoder = false;  // text-to-image never needs it
  bool use_ema = false;           // single-file checkpoints with EMA weights
  // Compute dtype of the UNet and VAE, as Flax's from_pretrained(dtype=...): BF16 packs their
  // weights as bfloat16 (half the memory; no float32 copy is kept) and computes their products
  // in bf16 with float32 sums. The text encoder is always float32. Requests must ask for the
  // dtype the model was loaded with.
  ComputeDType dtype = ComputeDType::F32;
  // Packed weights are kept in per-component cache files (io/weight_cache.h) under
  // `weight_cache_dir` (default: <octodiff cache dir>/weights): the first load packs into them,
  // later loads of the same files map them, and the pipeline drops components it is not using
  // from memory. Off (or $OCTODIFF_WEIGHT_CACHE=off) keeps everything on the heap instead.
  bool weight_cache = true;
  std::optional<std::filesystem::path> weight_cache_dir;
  uint64_t weight_cache_capacity_limit = 0;  // tests: behave as if the disk filled up there
  // Whether the pipeline drops a network's weights from memory after its phase (weights in cache
  // files only; see WeightResidency). $OCTODIFF_WEIGHT_RESIDENCY=auto|minimal|resident overrides.
  WeightResidency residency = WeightResidency::Auto;
  // LoRAs merged into the UNet and text encoder(s) (pipeline/lora.h; SDXL: both towers), in order. load() loads the
  // model without them first (its base, through the weight cache as usual), then with_loras().
  std::vector<LoraSpec> loras;
  // A tiny autoencoder (TAESD: a diffusers AutoencoderTiny folder or madebyollin's
  // *_decoder.safetensors) loaded beside the model: GenerationRequest::decoder = Tiny decodes
  // with it, and previews use it. Its latent channels must be the VAE's.
  std::optional<std::filesystem::path> tiny_autoencoder;
  // Load the folder's safety_checker/ when it has one (pipeline/safety_check.h), as the Flax
  // pipeline does; false skips it (and its memory: ~1.2 GB for SD's ViT-L/14).
  bool load_safety_checker = true;
};

class WeightCacheFile;

// TextEncoder2: SDXL's second text tower. release()/prefetch() of TextEncoder act on both text
// encoders (the text-encoding phase uses them together).
enum class ModelComponent { TextEncoder = 0, UNet = 1, Vae = 2, TextEncoder2 = 3 };

class StableDiffusionModel {
 public:
  // `path`: a diffusers folder (model_index.json + component folders) or a single-file
  // checkpoint (.safetensors with ldm keys). Errors name the file and what is wrong.
  static std::shared_ptr<const StableDiffusionModel> load(const std::filesystem::path& path,
                                                          const ModelLoadOptions& options = {});

  // `model` (or the base it was made from) with `loras` merged, sharing everything the LoRAs do
  // not change: tokenizer, VAE, weight caches, and the packed weights of every UNet and text
  // encoder layer no LoRA touches; only the touched layers are read, merged and packed (see
  // pipeline/lora.h). Switching LoRAs or strengths = calling this again on the same model. An
  // empty list gives the base. Errors (a file that is not a LoRA for this model, …) name the
  // file and the tensor; the model is unchanged then. Memory: the result keeps its base alive
  // (base_model()) and adds only the touched layers' packed weights (on the heap); the base keeps
  // its components' weight sources, i.e. the checkpoint stays mapped (address space, not RSS).
  static std::shared_ptr<const StableDiffusionModel> with_loras(const std::shared_ptr<const StableDiffusionModel>& model,
                                                                const std::vector<LoraSpec>& loras);
  // The LoRAs merged into this model (empty for a base model).
  const std::vector<AppliedLora>& loras() const { return loras_; }
  // The model without LoRAs this one was made from (nullptr when this is one).
  const std::shared_ptr<const StableDiffusionModel>& base_model() const { return base_; }
  // How the UNet's / text encoder's packed weights were obtained by the load that made this
  // model: packed, mapped from the weight cache, or shared with the base (with_loras).
  PackedLayerStats packed_layer_stats(ModelComponent c) const;

  // The embedded default model shipped in resources/ (installed or in the source tree).
  static std::filesystem::path default_model_path();

  const std::filesystem::path& path() const { return path_; }
  std::string display_name() const;
  bool single_file() const { return single_file_; }
  const std::string& description() const { return description_; }  // e.g. "SD 1.x (diffusers folder)"
  ComputeDType dtype() const { return dtype_; }                    // what ModelLoadOptions::dtype asked for

  const ClipTokenizer& tokenizer() const { return *tokenizer_; }
  const ClipTextModel& text_encoder() const { return *text_encoder_; }
  // SDXL (a diffusers folder with text_encoder_2/ and tokenizer_2/, pipeline/sdxl_model.cpp):
  // the second tokenizer and text tower, and model_index.json's force_zeros_for_empty_prompt
  // (true when absent). text_encoder_2()/tokenizer_2() only when is_sdxl().
  bool is_sdxl() const { return text_encoder_2_ != nullptr; }
  const ClipTokenizer& tokenizer_2() const { return *tokenizer_2_; }
  const ClipTextModelWithProjection& text_encoder_2() const { return *text_encoder_2_; }
  bool force_zeros_for_empty_prompt() const { return force_zeros_for_empty_prompt_; }
  const UNet2DCondition& unet() const { return *unet_; }
  const AutoencoderKL& vae() const { return *vae_; }
  // The tiny autoencoder ModelLoadOptions::tiny_autoencoder named; null when none was given.
  const std::shared_ptr<const AutoencoderTiny>& tiny_autoencoder() const { return tiny_autoencoder_; }
  // The folder's safety checker (pipeline/safety_check.h); null when it has none or it was not loaded.
  const std::shared_ptr<const SafetyCheckerComponent>& safety_checker() const { return safety_checker_; }
  // scheduler_config.json text (empty: SD's default PNDM configuration).
  const std::string& scheduler_config_json() const { return scheduler_json_; }
  // Class `kind` configured from that file (diffusers' Cls.from_config), with the timestep
  // spacing replaced when `spacing` is given. Errors name the config file.
  // `spacing`, `karras_sigmas` and `zero_snr` override the file's timestep_spacing,
  // use_karras_sigmas and rescale_betas_zero_snr; throws octodiff::Error for a configuration the
  // class cannot use (Karras sigmas or zero terminal SNR for PNDM, …).
  SchedulerConfig scheduler_config(SchedulerKind kind, std::optional<TimestepSpacing> spacing = std::nullopt,
                                   std::optional<bool> karras_sigmas = std::nullopt,
                                   std::optional<bool> zero_snr = std::nullopt) const;
  // The model's own scheduler, what a request without a scheduler uses:
  // - a diffusers folder: the class its scheduler/scheduler_config.json names in "_class_name"
  //   (PNDMScheduler, DDIMScheduler, LMSDiscreteScheduler, DPMSolverMultistepScheduler,
  //   EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, LCMScheduler); PNDM when the folder
  //   has no scheduler config or the file names no class, and PNDM plus a load note when it names
  //   a class Octodiff does not implement;
  // - a single-file checkpoint (SD 1.x, SD 2.x, epsilon or v-prediction alike): PNDM, the
  //   configuration the single-file loader writes (skip_prk_steps, steps_offset 1) and what the
  //   Flax pipeline's from_pretrained of the converted model gives; SDXL: Euler (leading), as
  //   stable-diffusion-xl-base-1.0; a checkpoint with the `ztsnr` marker (io/single_file.h):
  //   Euler with zero terminal SNR and trailing timesteps (PNDM has no zero SNR).
  SchedulerKind default_scheduler() const { return default_scheduler_; }
  // Its configuration asks for Karras sigmas (use_karras_sigmas; false for a configuration the
  // pipeline would refuse).
  bool default_scheduler_has_karras_sigmas() const;
  // Its configuration asks for zero terminal SNR (rescale_betas_zero_snr; false likewise).
  bool default_scheduler_has_zero_snr() const;

  int vae_scale_factor() const { return vae_->config().scale_factor(); }
  int default_height() const { return unet_->config().sample_size * vae_scale_factor(); }
  int default_width() const { return default_height(); }
  // Image sizes must be multiples of this (VAE scale × UNet down-sampling).
  int size_multiple() const { return vae_scale_factor() * unet_->config().latent_multiple(); }

  // First 10 hex digits of the SHA-256 of the main weights file (A1111's "Model hash"); computed
  // on first use and cached on disk by (path, size, mtime).
  std::string model_hash() const;
  int64_t weights_bytes() const { return weights_bytes_; }

  // Memory of the components' weights when they live in weight cache files (else no-ops):
  // release() drops a component's pages (they come back from the page cache on next use),
  // prefetch() starts mapping them back in ahead of use and returns (a thread of the cache's maps
  // them in layer order while the network runs: WeightCacheFile::prefetch).
  void release(ModelComponent c) const;
  void prefetch(ModelComponent c) const;
  // Where the weights stay resident: prefetch() of every network, so that the first run finds
  // them in memory instead of reading them from the disk as it goes — the app calls it once a
  // model is loaded, while its user writes a prompt. Else nothing: the minimal residency keeps
  // one network in memory at a time, in its phase.
  void warm_up() const;
  // Waits for every prefetch() in flight (tests, benchmarks).
  void wait_for_prefetch() const;
  // Whether release() drops anything: the residency ModelLoadOptions asked for, with Auto decided
  // at load from the cached weights' size and physical memory (without a weight cache there is
  // nothing to drop: the heap weights are always resident, and Auto reads Resident). The
  // pipeline keeps its activation arenas between runs when this is true (sharded_pipeline.h).
  bool weights_stay_resident() const { return resident_; }
  // The packed weights of every component mapped from cache files, in bytes.
  uint64_t cached_weight_bytes() const;
  // Bytes of the component's cache-file weights mapped into the process now (0 on the heap).
  uint64_t resident_weight_bytes(ModelComponent c) const;
  // True when the component's packed weights were mapped from an existing cache (nothing packed).
  bool loaded_from_cache(ModelComponent c) const;
  // What loading had to work around (e.g. the weight cache could not be written: disk full),
  // as known now: a first load's caches are written in the background after load() returns.
  std::vector<std::string> load_notes() const;
  // Waits until the weight caches a first load writes are on disk (or given up); then
  // load_notes() is final. Returns the seconds waited.
  double wait_for_weight_caches() const;

 private:
  void finish_weight_caches_at_normal_priority() const;
  void decide_residency(const ModelLoadOptions& options);
  void load_tiny_autoencoder(const ModelLoadOptions& options);
  // SDXL: tokenizer_2/ and text_encoder_2/ of the folder `root` when it has them (pipeline/sdxl_model.cpp);
  // returns the second tower's hidden size (0 when the folder has none) and adds its weight files' bytes.
  int load_sdxl_second_text_encoder(const std::filesystem::path& root, const ModelLoadOptions& options);
  // Sets scheduler_json_ and default_scheduler_ from a scheduler_config.json text read from `where`.
  void set_scheduler_config(std::string json_text, const std::string& where);
  void keep_sources(const WeightSource& unet, const WeightSource& text_encoder);
  void share_base_parts(const StableDiffusionModel& base);  // with_loras(): all but the LoRA'd networks
  PackedLayersScope recorder(ModelComponent c);  // records a component's packed layers as it loads
  template <typename Load>
  auto load_component(const ModelLoadOptions& o, ModelComponent c, const std::vector<std::filesystem::path>& files,
                      const WeightSource& source, Load load);

  std::filesystem::path path_;
  bool single_file_ = false;
  std::string description_;
  ComputeDType dtype_ = ComputeDType::F32;
  std::filesystem::path hash_file_;
  int64_t weights_bytes_ = 0;
  std::shared_ptr<ClipTokenizer> tokenizer_;
  std::shared_ptr<ClipTextModel> text_encoder_;
  std::shared_ptr<ClipTokenizer> tokenizer_2_;                       // SDXL only
  std::shared_ptr<ClipTextModelWithProjection> text_encoder_2_;      // SDXL only
  bool force_zeros_for_empty_prompt_ = true;
  std::shared_ptr<UNet2DCondition> unet_;
  std::shared_ptr<AutoencoderKL> vae_;
  std::shared_ptr<const AutoencoderTiny> tiny_autoencoder_;
  std::shared_ptr<const SafetyCheckerComponent> safety_checker_;
  std::string scheduler_json_;
  std::string scheduler_source_;  // where scheduler_json_ came from, for errors
  SchedulerKind default_scheduler_ = SchedulerKind::Pndm;
  // What with_loras() needs to load the UNet and text encoder(s) again: their weight sources as
  // they were before loading (nothing taken), and the packed layers the first load made.
  std::shared_ptr<const WeightSource> unet_source_, text_encoder_source_;
  std::shared_ptr<const WeightSource> text_encoder_2_source_;  // SDXL only
  PackedLayers packed_layers_[4];    // by ModelComponent: TextEncoder, UNet, (Vae: unused), TextEncoder2
  PackedLayerStats layer_stats_[4];  // by ModelComponent, as packed_layers_
  std::vector<AppliedLora> loras_;
  std::shared_ptr<const StableDiffusionModel> base_;
  std::shared_ptr<WeightCacheFile> caches_[4];  // by ModelComponent
  bool from_cache_[4] = {false, false, false, false};
  bool resident_ = false;
  std::vector<std::string> load_notes_;
  mutable std::once_flag hash_once_;
  mutable std::string hash_;
};

// The safetensors files of one diffusers component folder (e.g. <model>/unet), honouring
// variants and sharding; explains what to do when only .bin/.msgpack weights exist.
std::vector<std::filesystem::path> component_weight_files(const std::filesystem::path& dir,
                                                          const std::string& base_name,
                                                          const std::string& variant);

}  // namespace octodiff
