// How an image was made, written into its PNG and read back.
//
// Two text chunks: "parameters" in AUTOMATIC1111's format (so other tools show the prompt and
// settings), and "octodiff": JSON with everything needed to reproduce the image exactly —
// model hash, compatibility mode, RNG scheme, device index and that device's PRNG key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/png.h"
#include "pipeline/generation.h"

namespace octodiff {

class StableDiffusionModel;

struct ImageMetadata {
  std::vector<std::string> prompts;           // one for a single image; every image's for a grid
  std::vector<std::string> negative_prompts;  // same count as prompts
  int64_t seed = 0;
  int steps = 0;
  double guidance_scale = 7.5;
  SchedulerKind scheduler = SchedulerKind::Pndm;  // the scheduler actually used
  bool scheduler_is_models_own = false;           // it is the model's default_scheduler()
  std::optional<TimestepSpacing> timestep_spacing;  // as used (absent in older metadata)
  // Karras sigmas on or off, for the schedulers that have them (lms, euler, dpm++); absent for the
  // others and in older metadata. A1111 text: the sampler's " Karras" suffix ("DPM++ 2M Karras"),
  // also read from A1111 1.9's "Schedule type: Karras"; JSON: "karras_sigmas".
  std::optional<bool> karras_sigmas;
  // Zero terminal SNR (GenerationRequest::zero_snr) as used, present when it was on or when the
  // model's own configuration has it on (so that off is said too). A1111 text: "Noise Schedule:
  // Zero Terminal SNR" or "Default" (A1111's option and key); JSON: "zero_snr".
  std::optional<bool> zero_snr;
  // GenerationRequest::guidance_rescale; 0: off, not written. A1111 text: "CFG Rescale phi: 0.7"
  // (the key of A1111's CFG-rescale extension); JSON: "guidance_rescale".
  double guidance_rescale = 0;
  Decoder decoder = Decoder::Vae;                   // what decoded the image (older metadata: the VAE)
  std::optional<double> denoising_strength;         // image-to-image runs: the strength (A1111's key)
  // Inpainting runs (pipeline/inpaint.h). A1111 text: "Mask blur: N", "Inpaint area: Whole picture"
  // or "Only masked", "Masked area padding: N" (only masked), "Masked content: original" (strength
  // < 1: the start is the noised init image) or "latent noise" (strength 1), and Octodiff's
  // "Inpaint mode: 9-channel unet" or "latent blend"; JSON: "inpaint": {mask_blur, area
  // ("whole"/"masked"), padding, masked_content, mode}. The masks themselves are not stored.
  struct Inpaint {
    int mask_blur = 0;
    bool only_masked = false;
    int padding = 32;
    std::string masked_content = "original";  // A1111's name: "original" or "latent noise"
    std::string mode;                          // inpaint_mode_name
  };
  std::optional<Inpaint> inpaint;
  // Present when the VAE decoded in tiles (pipeline/tiled_decode.h): A1111 text "VAE tile: 512,
  // VAE tile overlap: 128" (Octodiff's keys, image pixels); JSON "vae_tiling": {tile_px,
  // overlap_px, scale} (scale: image pixels per latent pixel; the text assumes SD's 8).
  struct VaeTiles {
    int tile_px = 0, overlap_px = 0, scale = 8;
  };
  std::optional<VaeTiles> vae_tiles;
  int width = 0, height = 0;
  int devices = 1, batch_per_device = 1;
  int device = -1, batch_index = -1;          // -1: a grid of all images
  std::optional<jax::Key> device_key;
  Compat compat = Compat::Flax;
  jax::RngScheme rng = jax::RngScheme::Classic;
  ComputeDType dtype = ComputeDType::F32;
  std::string model_name, model_hash;
  // LoRAs merged into the model (StableDiffusionModel::loras()). In the A1111 text, as A1111 writes
  // them: a `<lora:NAME:STRENGTH>` tag per LoRA appended to the prompt and
  // `Lora hashes: "NAME: HASH, …"` (HASH = the first 12 hex digits of the file's SHA-256, A1111's
  // short hash), so A1111 applies them again; in the JSON, "loras": [{name, strength, hash}]
  // beside the prompts as the pipeline ran them (without tags).
  struct Lora {
    std::string name;
    float strength = 1.0f;
    std::string hash;
  };
  std::vector<Lora> loras;
  // How the prompts were read. JSON: "prompt_syntax", "long_prompts", "comma_backtrack" (when not
  // 0), absent in older metadata: plain, truncate. A1111 text: "Prompt syntax: a1111", "Long prompts:
  // chunk", "Comma backtrack: N" (Octodiff's keys, written when not the default); text without
  // Octodiff's "Compat" key was written by A1111 itself, which reads a1111 syntax, chunks and
  // backtracks 20 tokens to a comma (its default setting).
  PromptSyntax prompt_syntax = PromptSyntax::Plain;
  LongPrompts long_prompts = LongPrompts::Truncate;
  int comma_backtrack = 0;
  // GenerationRequest::clip_skip: A1111's "Clip skip: N" and JSON "clip_skip", both written when
  // not 1 (absent: 1).
  int clip_skip = 1;
  // Textual inversions the prompts called: JSON "embeddings": [{name, hash}]; A1111 text
  // `TI hashes: "NAME: HASH, …"` (A1111's key; HASH = the first 12 hex digits of the file's SHA-256).
  struct Embedding {
    std::string name, hash;
  };
  std::vector<Embedding> embeddings;
  // ControlNets of the run (GenerationRequest::controlnets). In the A1111 text, as the
  // sd-webui-controlnet extension writes them: `ControlNet 0: "Module: canny, Model: NAME,
  // Weight: 0.8, Guidance Start: 0.0, Guidance End: 1.0"` (plus `Threshold A: 100.0, Threshold B:
  // 200.0` for canny); in the JSON, "controlnets": [{name, module, weight, guidance_start,
  // guidance_end}] (plus threshold_a, threshold_b for canny).
  struct ControlNet {
    std::string name, module = "none";
    double weight = 1.0, guidance_start = 0.0, guidance_end = 1.0;
    double threshold_a = 100, threshold_b = 200;  // canny's low and high thresholds
  };
  std::vector<ControlNet> controlnets;
  bool injected_latents = false;
  // SDXL's size conditioning when given (GenerationRequest::sdxl_size, with --compat diffusers).
  // A1111 text (Octodiff's keys, written for the fields set): "Original size: WxH", "Crop top: N,
  // Crop left: N", "Target size: WxH"; JSON "sdxl_size": {original_size: [h, w],
  // crops_coords_top_left: [top, left], target_size: [h, w]} (diffusers' names and order).
  SdxlSizeConditioning sdxl_size;
  // The safety checker's verdict (pipeline/safety_check.h): one entry for a single image, every
  // image's for a grid; empty when no checker ran. JSON "nsfw_flagged": [bool, …]; A1111 text
  // "Safety checker: flagged" / "passed" (a grid: "flagged images 2 5 of 8" / "passed").
  std::vector<bool> nsfw_flagged;
  std::string version;                        // octodiff version that made it (empty if unknown)
  // Read from another tool's A1111 text only: settings of that image this port cannot apply, one
  // sentence each ("the sampler 'UniPC' is not available here: the model's own scheduler runs"),
  // for the app and CLI to say; never written. scheduler_unavailable: its sampler has no
  // counterpart here, so request_from_metadata leaves the scheduler to the model.
  std::vector<std::string> not_applied;
  bool scheduler_unavailable = false;

  bool is_grid() const { return device < 0; }
};

// Metadata of image (d, b) of a result, or of the whole grid when d < 0.
ImageMetadata describe_image(const GenerationRequest& request, const GenerationResult& result,
                             const StableDiffusionModel& model, int d, int b);

// A1111 "parameters" text: prompt, "Negative prompt: …", then "Steps: …, Sampler: …, …".
std::string a1111_parameters(const ImageMetadata& m);
std::string metadata_json(const ImageMetadata& m);
std::vector<PngText> png_texts(const ImageMetadata& m);

// Reads the "octodiff" chunk, or failing that the A1111 "parameters" text (fewer fields).
// nullopt when the PNG carries neither.
std::optional<ImageMetadata> parse_png_metadata(const std::vector<PngText>& texts);

// A request that makes this image (or grid) again.
GenerationRequest request_from_metadata(const ImageMetadata& m);

// Canonical A1111-style sampler name ("PNDM", "DDIM", "LMS", "DPM++ 2M", "Euler", "Euler a", "LCM").
std::string sampler_display_name(SchedulerKind kind);

}  // namespace octodiff
