// What a caller asks the sharded pipeline for, and what comes back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "models/numerics.h"
#include "pipeline/prompt_chunks.h"
#include "pipeline/vae_tiling.h"
#include "random/jax_prng.h"
#include "schedulers/scheduler.h"

namespace octodiff {

// flax      — as FlaxStableDiffusionPipeline: PNDM makes N UNet calls, classifier-free guidance
//             for every guidance scale above 1, Flax scheduler semantics, `flax` numerics. The
//             default. (The Flax pipeline guides at every scale; at guidance ≤ 1 Octodiff runs one
//             pass on the prompts alone in both modes, as SD-Turbo-style models expect: with 1
//             the results differ from two passes by rounding only, below 1 Flax would steer
//             towards the negative prompt.)
// diffusers — as the PyTorch StableDiffusionPipeline: PNDM makes N+1 calls, guidance only when
//             guidance_scale > 1, torch scheduler semantics, `diffusers` numerics — so results
//             can be compared with diffusers' outputs.
enum class Compat { Flax, Diffusers };
Compat parse_compat(const std::string& name);
std::string compat_name(Compat c);

// What turns the final latents into images: the model's VAE, or a tiny autoencoder (TAESD,
// diffusers' AutoencoderTiny: ~18× fewer products, "fudges fine details") loaded beside it
// (ModelLoadOptions::tiny_autoencoder).
enum class Decoder { Vae, Tiny };
Decoder parse_decoder_name(const std::string& name);  // "vae", "taesd"
std::string decoder_name(Decoder d);                  // "vae", "taesd"

enum class ComputeDType { F32, BF16 };

class ControlNetModel;

// One ControlNet of a request (pipeline/controlnet.h): torch's StableDiffusionControlNetPipeline
// arguments for it (several = MultiControlNetModel: their scaled residuals are summed).
struct ControlNetUse {
  std::shared_ptr<const ControlNetModel> model;  // loaded once (load_controlnet), shared by runs
  std::string name;                   // how metadata names it (e.g. the file's stem)
  double scale = 1.0;                 // controlnet_conditioning_scale
  double guidance_start = 0.0;        // control_guidance_start: fraction of the calls run
  double guidance_end = 1.0;          // control_guidance_end
  // The control images, RGB, already preprocessed (edges, …): 1 for every device or D. Resized
  // to the generation size with Lanczos; in [0, 1] (x / 255) as the ControlNet takes them.
  std::vector<Image8> images;
  std::string preprocessor = "none";  // what made the images from the user's (metadata: A1111 "Module")
  double threshold_a = 100, threshold_b = 200;  // its thresholds (canny: low, high), for metadata
};
ComputeDType parse_dtype_name(const std::string& name);  // "f32"/"float32", "bf16"/"bfloat16"
std::string dtype_display_name(ComputeDType d);

// SDXL's size conditioning (the UNet's time_ids, pipeline/sdxl_prompt_encoding.h): diffusers'
// original_size, crops_coords_top_left and target_size. 0 = the image's height/width, no crop.
// Only under Compat::Diffusers: the Flax pipeline always conditions on (h, w, 0, 0, h, w).
struct SdxlSizeConditioning {
  int original_height = 0, original_width = 0;
  int crop_top = 0, crop_left = 0;
  int target_height = 0, target_width = 0;
  bool given() const {
    return original_height || original_width || crop_top || crop_left || target_height || target_width;
  }
};

// The largest clip skip a request may ask for before the model's text encoder bounds it (SD 1.x's
// has 12 layers, SD 2.x's 23): the CLI's and the comparison sheets' range.
constexpr int kMaxClipSkip = 48;

struct GenerationRequest {
  // One prompt per image, device-major (image i runs on device i / B, slot i % B); a single
  // prompt is used for every image.
  std::vector<std::string> prompts;
  // Empty: the empty prompt (the Flax pipeline's default); one: for every image; else one per image.
  std::vector<std::string> negative_prompts;
  // How prompts are read (pipeline/prompt_chunks.h). Plain (the default) keeps the Flax pipeline's
  // reading exactly; A1111 reads the emphasis syntax "(word:1.3)", "[word]", "BREAK"
  // (text/prompt_syntax.h). Truncate keeps one 77-token window (a warning says what was dropped);
  // Chunk encodes every token, in 75-token chunks (the UNet's context then has 77 × chunks tokens).
  PromptSyntax prompt_syntax = PromptSyntax::Plain;
  LongPrompts long_prompts = LongPrompts::Truncate;
  int comma_backtrack = 0;     // A1111's comma padding backtrack when chunking (0: off; A1111: 20)
  // A1111's "Clip skip": the prompts' embeddings from the text encoder's clip_skip-th last layer,
  // through its final LayerNorm (1: the last layer, as every pipeline runs; 2: the penultimate,
  // which models trained on NovelAI's want). diffusers' clip_skip is this minus 1; it applies to
  // prompts and negative prompts alike, as in A1111. SD 1.x/2.x; SDXL takes its penultimate
  // layer whatever this says (a warning says so), as A1111 does.
  int clip_skip = 1;  // 1 … kMaxClipSkip, and at most the text encoder's layers
  // Textual-inversion embeddings (*.safetensors, io/textual_inversion.h) called by their file
  // names in prompts and negative prompts; empty: none.
  std::string embeddings_dir;
  int64_t seed = 0;
  int steps = 50;
  double guidance_scale = 7.5;
  // nullopt: the model's own scheduler (StableDiffusionModel::default_scheduler()).
  std::optional<SchedulerKind> scheduler;
  // nullopt: the scheduler configuration's timestep_spacing (the class default when the model's
  // scheduler_config.json has none). LCM ignores it, as diffusers' LCMScheduler does.
  std::optional<TimestepSpacing> timestep_spacing;
  // nullopt: the scheduler configuration's use_karras_sigmas (off when it has none); true/false:
  // Karras sigmas on or off (A1111's "DPM++ 2M Karras", "Euler Karras", "LMS Karras"; true needs
  // the lms, euler, dpm++ or dpm++-sde scheduler). They run the torch classes' algorithm whatever `compat`
  // says: diffusers' Flax schedulers have no Karras sigmas.
  std::optional<bool> karras_sigmas;
  // nullopt: the scheduler configuration's rescale_betas_zero_snr (off when it has none or its
  // class has none: PNDM, LMS); true/false: zero terminal SNR on or off (A1111's "Noise Schedule:
  // Zero Terminal SNR", for models trained with it; true needs ddim, euler, euler-a, dpm++,
  // dpm++-sde or lcm). The torch classes' algorithm whatever `compat` says, as Karras sigmas.
  std::optional<bool> zero_snr;
  // diffusers' guidance_rescale φ (StableDiffusionPipeline's rescale_noise_cfg, "Common Diffusion
  // Noise Schedules and Sample Steps are Flawed" §3.4; A1111's "CFG Rescale phi"), in [0, 1]: the
  // guided noise is mixed with itself rescaled to the standard deviation of the prompt's
  // prediction, per image: noise = φ·noise·(std(c)/std(noise)) + (1 − φ)·noise. 0 (default): off.
  // Only with classifier-free guidance (two passes); in every pipeline of the family and both
  // `compat` modes (the Flax pipelines have none).
  double guidance_rescale = 0.0;
  int height = 0, width = 0;   // 0: the model's default size
  int devices = 0;             // 0: prompts.size() / batch_per_device
  int batch_per_device = 1;
  Compat compat = Compat::Flax;
  jax::RngScheme rng = jax::RngScheme::Classic;
  ComputeDType dtype = ComputeDType::F32;
  int threads = 0;             // 0: all hardware threads
  // Initial noise, (D, B, C, h, w) float32: the Flax pipeline's `latents` argument. When absent
  // each device draws normal(key_d, (B, C, h, w)) from split(PRNGKey(seed), D)[d].
  std::optional<Tensor> latents;
  // Empty: device d's key is split(PRNGKey(seed), D)[d]. Else one key per device, used instead
  // for everything the device draws (initial noise, posterior and step noise): a comparison
  // sheet (pipeline/comparison_sheet.h) gives each device the key of the single run it stands for.
  std::vector<jax::Key> device_keys;
  // The fresh noise of stochastic schedulers' steps (LCM, Euler ancestral), (D, N, B, C, h, w)
  // float32 for N UNet calls per device (image-to-image: the calls run, from t_start): the k-th
  // call run on device d takes [d, k] when its scheduler step
  // adds noise. When absent, each call draws its own from the device's key (the rule in
  // schedulers/scheduler.h). For replaying a run whose noise came from elsewhere (diffusers').
  std::optional<Tensor> step_noise;
  bool preview = false;        // send a cheap latent→RGB preview after every step
  Decoder decoder = Decoder::Vae;
  // Whether the VAE decodes in overlapping tiles (pipeline/tiled_decode.h): by default (auto) only
  // when a whole decode would take over a quarter of physical memory. TAESD always decodes whole.
  VaeTiling vae_tiling;

  // Image-to-image (pipeline/image_to_image.h) when not empty: 1 image for every device, or D
  // (device d's B images all start from image d). Each is floored to a multiple of 32 (Flax) or 8
  // (diffusers) per side and resized to it with PIL's Lanczos; that size must equal height ×
  // width when those are given, and gives them when they are 0. Needs the VAE encoder
  // (ModelLoadOptions::load_vae_encoder). In this mode `latents` is the noise added to the
  // image latents (the Flax pipeline's `noise`, diffusers' `noise` in prepare_latents).
  std::vector<Image8> init_images;
  // The fraction of the schedule an image-to-image run denoises, in (0, 1]: the run begins at
  // call t_start = steps − min(int(steps·strength), steps) (LCM: Scheduler::set_timesteps_for_strength).
  double strength = 0.8;
  // The ε of the VAE posterior sample mean + std·ε of the init images, (D, B, C, h, w) float32.
  // When absent: Flax's sample(key_d), i.e. normal(key_d) over (B, h, w, C) in NHWC order — the
  // same key and so the same values as the noise, read in another layout.
  std::optional<Tensor> posterior_noise;

  // Inpainting (pipeline/inpaint.h) when not empty: needs init_images; 1 mask for every device or
  // D (device d's mask goes with its init image), each the size of the init images before they
  // are floored and resized. White (≥ 0.5 after blur) is repainted, black kept. 9-channel
  // inpainting UNets run as FlaxStableDiffusionInpaintPipeline; 4-channel UNets with diffusers'
  // legacy blend of the noised init latents outside the mask after every step.
  std::vector<Image8> masks;
  int mask_blur = 0;                 // Gaussian blur radius of the mask in pixels (A1111 "Mask blur")
  bool inpaint_only_masked = false;  // A1111 "Inpaint area: Only masked": crop around the mask, paste back
  int only_masked_padding = 32;      // pixels around the mask's bounding box in that mode
  // 9-channel inpainting: the ε of the masked images' VAE posterior sample, (D, B, C, h, w)
  // float32. When absent: Flax's sample(split(key_d)[1]), normal over (B, h, w, C) in NHWC order.
  std::optional<Tensor> masked_posterior_noise;

  // ControlNets (pipeline/controlnet.h) run beside the UNet at every call (both halves of a
  // guided batch, guess mode off); their images set the size when height/width are 0 (sides
  // floored to a multiple of 64 under Flax, of the VAE scale under diffusers).
  std::vector<ControlNetUse> controlnets;

  // Run the model's safety checker (pipeline/safety_check.h) when it has one: each image is
  // marked in GenerationResult::nsfw_flagged, never blacked out.
  bool safety_checker = true;
  SdxlSizeConditioning sdxl_size;  // SDXL models only (see the struct)
};

// The static part of a request: a new signature compiles a new plan, like a jit re-trace.
struct Signature {
  int devices = 0, batch = 0, height = 0, width = 0, steps = 0;
  SchedulerKind scheduler = SchedulerKind::Pndm;             // resolved: the request's or the model's
  TimestepSpacing timestep_spacing = TimestepSpacing::Leading;  // resolved: the request's or the config's
  bool karras_sigmas = false;                                   // resolved: the request's or the config's
  bool zero_snr = false;                                        // resolved: the request's or the config's
  bool guidance = true;           // classifier-free guidance: two passes ([uncond; cond]) a step
  bool embedded_guidance = false;  // a guidance-distilled (LCM) UNet: one pass, guidance as its input
  ComputeDType dtype = ComputeDType::F32;
  Compat compat = Compat::Flax;
  Decoder decoder = Decoder::Vae;
  // Image-to-image: the strength (static, like the Flax pipeline's start_timestep); 0 otherwise.
  double strength = 0;
  bool inpaint = false;  // a mask: pipeline/inpaint.h (its mode follows from the model)
  bool operator==(const Signature&) const = default;
  std::string str() const;
};

struct Timings {
  double compile = 0;        // 0 when the plan came from the cache
  double text_encode = 0;
  double denoise = 0;        // all UNet steps of all devices (wall clock)
  double mean_step = 0;      // one UNet call + scheduler step on one device, averaged
  double encode_image = 0;   // image-to-image: the VAE encoder and the noised start latents
  std::vector<double> step;  // per step index: mean over devices
  double decode = 0;
  double safety_check = 0;   // the safety checker (0 when none ran)
  double total = 0;
};

struct GenerationResult {
  Signature signature;
  bool compiled = false;            // this call compiled its plan
  Tensor images;                    // (D, B, H, W, 3) float32 in [0, 1]
  Tensor initial_latents;           // (D, B, C, h, w): the noise before init_noise_sigma (image-to-image:
                                    // the noise added to the image latents)
  Tensor final_latents;             // (D, B, C, h, w): what was decoded (before 1/scaling_factor)
  std::vector<jax::Key> device_keys;
  std::vector<std::string> prompts, negative_prompts;  // one per image, as used
  std::vector<std::string> warnings;                   // e.g. prompts truncated to 77 tokens
  std::vector<int> context_tokens;  // per device: the length of the UNet's text context (77 × chunks)
  struct Embedding {
    std::string name, path;
  };
  std::vector<Embedding> embeddings;  // textual inversions the prompts called, in order of first use
  // The safety checker's verdict per image (D·B, device-major: image d·B + b), when it ran (the
  // model has one and the request asked for it); empty otherwise. Flagged images are kept as they
  // are (the Flax pipeline returns black ones instead).
  std::vector<bool> nsfw_flagged;
  int model_calls = 0;              // UNet calls per device
  int threads_per_device = 1, concurrent_devices = 1;
  Timings timings;
  int64_t peak_rss_bytes = 0;
  std::optional<VaeTiling> vae_tiles;  // the tiling, when the VAE decoded in tiles
};

enum class Phase { Compile, TextEncode, Denoise, Decode, Done };

struct ProgressEvent {
  Phase phase = Phase::Denoise;
  int device = 0;
  int step = 0;         // steps done on this device (Denoise)
  int total_steps = 0;
  double seconds = 0;   // duration of the step just finished
};

// Called from worker threads: GUIs must forward to their UI thread.
using ProgressCallback = std::function<void(const ProgressEvent&)>;
// Preview of device d's first image after `step` steps: decoded by the tiny autoencoder when the
// model has one, else a linear latent→RGB approximation.
using PreviewCallback = std::function<void(int device, int step, const Image8& preview)>;

}  // namespace octodiff
