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
  Decoder decoder = Decoder::Vae;                   // what decoded the image (older metadata: the VAE)
  std::optional<double> denoising_strength;         // image-to-image runs: the strength (A1111's key)
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
  // ControlNets of the run (GenerationRequest::controlnets). In the A1111 text, as the
  // sd-webui-controlnet extension writes them: `ControlNet 0: "Module: canny, Model: NAME,
  // Weight: 0.8, Guidance Start: 0.0, Guidance End: 1.0"` (plus `Threshold A: 100, Threshold B:
  // 200` for canny); in the JSON, "controlnets": [{name, module, weight, guidance_start, guidance_end}].
  struct ControlNet {
    std::string name, module = "none";
    double weight = 1.0, guidance_start = 0.0, guidance_end = 1.0;
  };
  std::vector<ControlNet> controlnets;
  bool injected_latents = false;
  std::string version;                        // octodiff version that made it (empty if unknown)

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
