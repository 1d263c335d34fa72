// ShardedPipeline: the Flax text-to-image pipeline on D devices × B images per device.
//
//   prompts (D·B) ─ tokenizer ─ ids (D, B, 77)                        [sharded]
//   PRNGKey(seed) ─ split(D) ─ key per device ─ normal ─ latents (B, 4, h, w)
//   per device: text encoder [uncond; cond] → N × (UNet → guidance → scheduler.step) → VAE
//   → images (D, B, H, W, 3) in [0, 1]
//
// The model is shared read-only by all devices. The first call with a new Signature compiles a
// plan (scheduler tables, device/thread layout, per-device activation arenas) and caches it;
// later calls with the same signature only run. At most kMaxCachedPlans plans are kept (the least
// recently used goes; compiling one again takes well under a millisecond). A device is a worker
// with its own thread budget; devices run side by side when the network is small enough that
// intra-op threads would idle, else one after another with every thread. Results are
// bit-identical whatever the threads.
//
// Activation memory. Each worker's arena takes slabs from the system as a phase needs them
// (core/arena.h). Fresh slabs cost page faults: a one-step 512×512 SD-Turbo image took 82 000
// of them a run, 0.3–1.0 s of system time on a 2-core VM, when its arenas were trimmed after
// every phase. So the slabs follow the weights (StableDiffusionModel::weights_stay_resident):
//   - weights resident: after a phase and after a run the arenas keep their slabs while they hold
//     at most kKeptActivationsFractionOfRam of physical memory (else they are trimmed), and the
//     next phase and the next run with this plan reuse them; a run first trims every other plan's
//     arenas, so between runs at most one plan (the last run's) holds activations;
//   - weights dropped after each phase (Minimal): the arenas are trimmed after every phase and
//     run, however it ends, so only one network's weights and activations are resident at a time
//     and no plan holds activation memory between runs.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/device.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/generation.h"
#include "pipeline/inpaint.h"
#include "pipeline/latent_preview.h"
#include "pipeline/model.h"
#include "pipeline/text_encoding_cache.h"

namespace octodiff {

// A request with every default applied and every check passed.
struct ResolvedRequest {
  GenerationRequest request;
  Signature signature;
  std::vector<std::string> prompts, negative_prompts;  // D·B each
  int latent_channels = 4, latent_height = 0, latent_width = 0;
  // Image-to-image: the init images as preprocessed (pipeline/image_to_image.h), 1 or D of
  // them; empty for text-to-image.
  std::vector<Image8> init_images;
  InpaintInputs inpaint;  // inpainting: the prepared masks (pipeline/inpaint.h); inactive otherwise
};

class ShardedPipeline {
 public:
  explicit ShardedPipeline(std::shared_ptr<const StableDiffusionModel> model);
  ~ShardedPipeline();

  const StableDiffusionModel& model() const { return *model_; }
  std::shared_ptr<const StableDiffusionModel> model_ptr() const { return model_; }

  // Applies defaults and validates; throws octodiff::Error with a message for the user.
  ResolvedRequest resolve(const GenerationRequest& request) const;

  // Runs a request (compiling its plan first if needed). Throws octodiff::Cancelled when `cancel`
  // is set during the run (within one UNet call), octodiff::Error for bad input or failures.
  GenerationResult run(const GenerationRequest& request, const ProgressCallback& progress = {},
                       const PreviewCallback& preview = {}, const CancelToken* cancel = nullptr);

  bool is_compiled(const Signature& s) const;
  void clear_plans();
  // The plan cache's bound, what it holds, and the activation memory its arenas hold from the
  // system (see "Activation memory" above). These wait for a running run to end.
  static constexpr size_t kMaxCachedPlans = 8;
  static constexpr double kKeptActivationsFractionOfRam = 0.25;
  size_t cached_plans() const;
  size_t arena_bytes_reserved() const;
  size_t plans_holding_activations() const;  // 0 or 1 between runs

  // Prompts' text encodings (SDXL: both towers') are kept per 77-token row and reused by later runs
  // of this pipeline, the same bits (text_encoding_cache.h). Off: every run encodes all its
  // prompts (benchmarks that time the encoder).
  void set_reuse_text_encodings(bool on);
  const TextEncodingCache& text_encodings() const { return text_cache_; }
  // A run's text phase alone: the request's prompts and negative prompts encoded into the cache
  // above (compiling its plan if needed), so that a run of them soon after finds every row there —
  // what the app's live mode does while the user pauses, before the run starts. The same rows, so
  // the same bits, as the run would encode; nothing when reuse is off. The seconds it took; throws
  // as run() for a bad request or when `cancel` is set.
  double encode_prompts(const GenerationRequest& request, const CancelToken* cancel = nullptr);

 private:
  struct Plan;
  Plan& plan_for(const ResolvedRequest& r, bool* compiled, double* seconds);
  void release_activations_of_other_plans(const Plan& in_use);
  const LatentPreview& previewer();
  // The preview image of a device's latents (B, h, w, C) after a step: its first image.
  Image8 render_preview(const Tensor& latents) const;
  DenoiseSetup denoise_setup(const Plan& plan, const ResolvedRequest& r) const;
  // Checks the init images of an image-to-image request and preprocesses them into r; sets
  // *height/*width from them when the request leaves those 0.
  void resolve_init_images(ResolvedRequest& r, int devices, int* height, int* width) const;
  // Device d's noise (B, C, h, w: GenerationResult::initial_latents) and the sample its loop
  // starts from (B, h, w, C): the noise × init_noise_sigma, or an image-to-image run's noised
  // image latents (pipeline/image_to_image.h); inpainting also fills *inpaint (pipeline/inpaint.h).
  void device_start(const ResolvedRequest& r, const Plan& plan, const jax::Key& key, int d, Tensor* noise,
                    Tensor* start, InpaintDevice* inpaint) const;
  // Device d's inputs to its inpainting start (pipeline/inpaint.h), given its noise and init-image ε.
  InpaintStartInputs inpaint_start_inputs(const ResolvedRequest& r, const Plan& plan, const jax::Key& key, int d,
                                          const Tensor& noise, const Tensor& image_eps) const;
  StepNoise device_step_noise(const ResolvedRequest& r, const Plan& plan, const jax::Key& key, int d) const;

  std::shared_ptr<const StableDiffusionModel> model_;
  mutable std::mutex run_mutex_;  // one run at a time
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  uint64_t plan_uses_ = 0;  // counts plan_for calls: each plan's last use, for evicting the oldest
  std::optional<LatentPreview> previewer_;
  TextEncodingCache text_cache_;
  bool reuse_text_encodings_ = true;
};

}  // namespace octodiff
