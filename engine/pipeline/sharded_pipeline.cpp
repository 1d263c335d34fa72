#include "pipeline/sharded_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/arena.h"
#include "core/error.h"
#include "core/memory.h"
#include "kernels/tensor_ops.h"
#include "pipeline/controlnet.h"
#include "pipeline/decode.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/device_runner.h"
#include "pipeline/image_to_image.h"
#include "pipeline/latents.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/sdxl_pipeline.h"
#include "pipeline/sdxl_prompt_chunks.h"
#include "pipeline/tiled_decode.h"

namespace octodiff {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr int kMaxImages = 64;
constexpr int kMaxSide = 4096;

}  // namespace

// ---------------------------------------------------------------------------------------------
// The compiled plan of one signature.

struct ShardedPipeline::Plan {
  Signature signature;
  std::unique_ptr<Scheduler> scheduler;
  SchedulerState initial_state;
  int calls = 0;       // the schedule's UNet calls
  int first_call = 0;  // the call runs begin at (image-to-image: t_start)
  double init_noise_sigma = 1;
  Numerics numerics;
  int workers = 1, threads_per_worker = 1;
  Arenas arenas;  // one per worker
  uint64_t last_use = 0;                              // ShardedPipeline::plan_uses_ when last run
};


ShardedPipeline::ShardedPipeline(std::shared_ptr<const StableDiffusionModel> model) : model_(std::move(model)) {
  if (!model_) fail("ShardedPipeline needs a model");
}

ShardedPipeline::~ShardedPipeline() = default;

std::string Signature::str() const {
  const char* guidance_str = embedded_guidance ? " embedded-cfg" : guidance ? " cfg" : " no-cfg";
  return cat("D=", devices, " B=", batch, " ", width, "x", height, " steps=", steps, " ",
             scheduler_name(scheduler), " ", timestep_spacing_name(timestep_spacing),
             karras_sigmas ? " karras" : "", zero_snr ? " zero-snr" : "", guidance_str, " ",
             dtype_display_name(dtype), " ", compat_name(compat), decoder == Decoder::Tiny ? " taesd" : "",
             strength > 0 ? cat(" img2img strength=", strength) : std::string(), inpaint ? " inpaint" : "");
}

// The request's devices (0: one per prompt batch) and every image's prompt and negative prompt
// (D·B each, into r); returns D. Throws octodiff::Error for counts that do not fit.
static int resolve_prompts(const GenerationRequest& req, ResolvedRequest& r) {
  if (req.prompts.empty()) fail("at least one prompt is needed (it may be the empty string)");
  if (req.batch_per_device < 1) fail("batch per device must be at least 1, got ", req.batch_per_device);
  const int B = req.batch_per_device;
  const int P = static_cast<int>(req.prompts.size());
  int D = req.devices;
  if (D < 0) fail("the number of devices must be positive, got ", D);
  if (D == 0) {
    if (P % B) fail(P, " prompts cannot be split into batches of ", B, " per device");
    D = P / B;
  }
  if (static_cast<int64_t>(D) * B > kMaxImages)
    fail(D, " devices × ", B, " images = ", int64_t{D} * B, " images; at most ", kMaxImages, " per run");
  const int n = D * B;
  if (P == 1) {
    r.prompts.assign(n, req.prompts[0]);
  } else if (P == n) {
    r.prompts = req.prompts;
  } else {
    fail(P, " prompts do not fit ", D, " devices × ", B, " per device (give 1 prompt or ", n, ")");
  }
  const int NP = static_cast<int>(req.negative_prompts.size());
  if (NP == 0) {
    r.negative_prompts.assign(n, "");
  } else if (NP == 1) {
    r.negative_prompts.assign(n, req.negative_prompts[0]);
  } else if (NP == n) {
    r.negative_prompts = req.negative_prompts;
  } else {
    fail(NP, " negative prompts for ", n, " images (give 0, 1 or ", n, ")");
  }
  if (!req.device_keys.empty() && static_cast<int>(req.device_keys.size()) != D)
    fail(req.device_keys.size(), " device keys for ", D, " devices (give none or one per device)");
  return D;
}

// Inpainting: the masks of r.request against its init images (pipeline/inpaint.h), into r.
static void resolve_masks(const StableDiffusionModel& m, ResolvedRequest& r, int D) {
  const InpaintMode mode = inpaint_mode_for(m.unet().config().in_channels, m.vae().config().latent_channels);
  r.inpaint = resolve_inpaint(r.request, r.request.init_images, r.init_images, D, mode);
}

// GenerationRequest::masked_posterior_noise: only for 9-channel inpainting, (D, B, C, h, w).
static void check_masked_posterior_noise(const ResolvedRequest& r, int D) {
  if (!r.inpaint.active || r.inpaint.mode != InpaintMode::UNetChannels)
    fail("masked-image posterior noise was given but this is no 9-channel inpainting run");
  const Shape expected{D, r.request.batch_per_device, r.latent_channels, r.latent_height, r.latent_width};
  if (r.request.masked_posterior_noise->shape() != expected)
    fail("Unexpected masked-image posterior noise shape, got ", shape_str(r.request.masked_posterior_noise->shape()),
         ", expected ", shape_str(expected));
}

// ControlNets (pipeline/controlnet.h): their control images against the size, into r.request.
static void resolve_controlnet_inputs(const StableDiffusionModel& m, const GenerationRequest& req, ResolvedRequest& r,
                                      int D, int* H, int* W) {
  // A ControlNet reads the latents alone, not an inpainting UNet's mask and masked-image channels
  // (diffusers' StableDiffusionControlNetInpaintPipeline): it must take the VAE's latent channels.
  UNetConfig controlled = m.unet().config();
  controlled.in_channels = m.vae().config().latent_channels;
  resolve_controlnets(r.request, controlled, m.vae_scale_factor(), D, H, W);
  if (r.inpaint.active && req.inpaint_only_masked) crop_control_images(r.request.controlnets, r.inpaint, D);
}

// The image size: positive, a multiple of the decoder's scale × the UNet's down-sampling, at most
// kMaxSide pixels.
static void check_image_size(const StableDiffusionModel& m, const GenerationRequest& req, int scale, int H, int W) {
  const int mult = scale * m.unet().config().latent_multiple();
  for (auto [v, name] : {std::pair{H, "height"}, {W, "width"}}) {
    if (v < 0) fail(name, " must be positive, got ", v);
    if (v % mult)
      fail(name, " ", v, " is not a multiple of ", mult, " (this model's ", decoder_name(req.decoder), " scale ", scale,
           " × UNet down-sampling ", m.unet().config().latent_multiple(), "); try ", std::max(mult, v / mult * mult));
    if (v > kMaxSide) fail(name, " ", v, " is larger than the maximum of ", kMaxSide, " pixels");
  }
}

// Steps, guidance, threads, VAE tiling and the dtype the model was loaded for.
static void check_run_settings(const StableDiffusionModel& m, const GenerationRequest& req) {
  if (req.steps < 1 || req.steps > 1000) fail("steps must be between 1 and 1000, got ", req.steps);
  if (!std::isfinite(req.guidance_scale)) fail("guidance scale must be a finite number");
  if (!(req.guidance_rescale >= 0.0 && req.guidance_rescale <= 1.0))
    fail("guidance rescale must lie in [0, 1] (0: off; 0.7 is the paper's), got ", req.guidance_rescale);
  if (req.threads < 0) fail("threads must be positive, got ", req.threads);
  clip_skip_layers(req.clip_skip, m.text_encoder().config());  // checks it
  check_vae_tiling(req.vae_tiling);
  // The dtype is a load-time property (weights are packed in it), as with Flax's from_pretrained.
  if (req.dtype != m.dtype())
    fail("dtype ", dtype_display_name(req.dtype), " needs the model loaded for ",
         dtype_display_name(req.dtype), " (this one was loaded for ", dtype_display_name(m.dtype()),
         "): load it again with ModelLoadOptions::dtype = ", dtype_display_name(req.dtype),
         " (octodiff-cli does this from --dtype)");
}

// The latent shape (r.latent_*) and the arrays given for it: latents, posterior noise and the
// masked image's posterior noise, each (D, B, C, h, w).
static void resolve_latent_shape(const StableDiffusionModel& m, const GenerationRequest& req, ResolvedRequest& r,
                                 int D, int scale, int H, int W) {
  const int B = req.batch_per_device;
  r.latent_channels = r.inpaint.active ? m.vae().config().latent_channels : m.unet().config().in_channels;
  if (r.latent_channels != m.vae().config().latent_channels)
    fail("this model's UNet takes ", r.latent_channels, " input channels (an inpainting model: give an init image "
         "and a mask); text-to-image and image-to-image need ", m.vae().config().latent_channels);
  r.latent_height = H / scale;
  r.latent_width = W / scale;
  if (req.latents) {
    const Shape expected{D, B, r.latent_channels, r.latent_height, r.latent_width};
    if (req.latents->shape() != expected)
      fail("Unexpected latents shape, got ", shape_str(req.latents->shape()), ", expected ", shape_str(expected));
    for (float v : *req.latents)
      if (!std::isfinite(v)) fail("the given latents contain NaN or infinity");
  }
  if (req.posterior_noise) {
    if (req.init_images.empty()) fail("posterior noise was given but no init image (it is for image-to-image)");
    const Shape expected{D, B, r.latent_channels, r.latent_height, r.latent_width};
    if (req.posterior_noise->shape() != expected)
      fail("Unexpected posterior noise shape, got ", shape_str(req.posterior_noise->shape()), ", expected ",
           shape_str(expected));
  }

  if (req.masked_posterior_noise) check_masked_posterior_noise(r, D);
}

// The plan's signature (generation.h): what a compiled plan is keyed by.
static void fill_signature(const StableDiffusionModel& m, const GenerationRequest& req, ResolvedRequest& r, int D,
                           int H, int W) {
  Signature& s = r.signature;
  s.devices = D;
  s.batch = req.batch_per_device;
  s.height = H;
  s.width = W;
  s.steps = req.steps;
  s.scheduler = req.scheduler ? *req.scheduler : m.default_scheduler();
  // The model's configuration for that class (validated here, before any work) decides the
  // spacing unless the request overrides it.
  const SchedulerConfig config =
      m.scheduler_config(s.scheduler, req.timestep_spacing, req.karras_sigmas, req.zero_snr);
  s.timestep_spacing = config.timestep_spacing;
  s.karras_sigmas = config.use_karras_sigmas;
  s.zero_snr = config.rescale_betas_zero_snr;
  // A guidance-distilled (LCM) UNet takes the scale as an input and runs one pass; other UNets
  // guide with two passes above 1 and run the prompts alone at ≤ 1 (generation.h, Compat).
  s.embedded_guidance = m.unet().config().time_cond_proj_dim > 0;
  s.guidance = !s.embedded_guidance && req.guidance_scale > 1.0;
  s.decoder = req.decoder;
  s.dtype = req.dtype;
  s.compat = req.compat;
  s.strength = r.init_images.empty() ? 0.0 : req.strength;
  s.inpaint = r.inpaint.active;
}

ResolvedRequest ShardedPipeline::resolve(const GenerationRequest& req) const {
  ResolvedRequest r;
  r.request = req;
  const int D = resolve_prompts(req, r);

  const StableDiffusionModel& m = *model_;
  check_sdxl_request(m, req);
  if (req.decoder == Decoder::Tiny && !m.tiny_autoencoder())
    fail("the tiny autoencoder decoder (taesd) needs one loaded beside the model "
         "(ModelLoadOptions::tiny_autoencoder; octodiff-cli --taesd PATH)");
  // Pixels per latent: the decoder's, as in diffusers, whose pipelines take vae_scale_factor from
  // the VAE they are given (the same 8 for SD's VAE and TAESD).
  const int scale =
      req.decoder == Decoder::Tiny ? m.tiny_autoencoder()->config().decoder_scale_factor() : m.vae_scale_factor();
  int H = req.height, W = req.width;
  if (!req.init_images.empty()) resolve_init_images(r, D, &H, &W);
  if (!req.masks.empty()) resolve_masks(m, r, D);
  if (!req.controlnets.empty()) resolve_controlnet_inputs(m, req, r, D, &H, &W);
  if (!H) H = m.unet().config().sample_size * scale;
  if (!W) W = m.unet().config().sample_size * scale;
  check_image_size(m, req, scale, H, W);
  check_run_settings(m, req);
  resolve_latent_shape(m, req, r, D, scale, H, W);
  fill_signature(m, req, r, D, H, W);
  return r;
}

void ShardedPipeline::resolve_init_images(ResolvedRequest& r, int devices, int* height, int* width) const {
  const GenerationRequest& req = r.request;
  const int n = static_cast<int>(req.init_images.size());
  if (n != 1 && n != devices)
    fail(n, " init images for ", devices, " devices (give 1 for every device or one per device)");
  if (!(req.strength > 0.0 && req.strength <= 1.0))
    fail("strength must be in (0, 1] (the fraction of the schedule an image-to-image run denoises), got ",
         req.strength);
  if (!model_->vae().has_encoder())
    fail("image-to-image needs the VAE encoder: load the model with ModelLoadOptions::load_vae_encoder "
         "(octodiff-cli does this for --init-image)");
  const int multiple = init_image_multiple(req.compat, model_->vae_scale_factor());
  for (int i = 0; i < n; ++i) {
    const std::string what = cat("init image ", i + 1);
    r.init_images.push_back(prepare_init_image(req.init_images[i], multiple, what));
    const Image8& im = r.init_images.back();
    if (im.width != r.init_images[0].width || im.height != r.init_images[0].height)
      fail(what, " is ", im.width, "×", im.height, " after preprocessing, init image 1 is ",
           r.init_images[0].width, "×", r.init_images[0].height, " (all must have one size)");
  }
  const Image8& first = r.init_images[0];
  const char* rule = req.compat == Compat::Flax ? " (sides floored to a multiple of 32)"
                                                : " (sides floored to a multiple of 8)";
  if ((*width && *width != first.width) || (*height && *height != first.height))
    fail("the init images are ", first.width, "×", first.height, rule, " but the request asks for ",
         *width ? *width : first.width, "×", *height ? *height : first.height,
         "; leave the size unset to take the images' or resize them");
  *width = first.width;
  *height = first.height;
}

bool ShardedPipeline::is_compiled(const Signature& s) const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  return plans_.count(s.str()) != 0;
}

void ShardedPipeline::clear_plans() {
  std::lock_guard<std::mutex> lock(run_mutex_);
  plans_.clear();
}

size_t ShardedPipeline::cached_plans() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  return plans_.size();
}

void ShardedPipeline::set_reuse_text_encodings(bool on) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  reuse_text_encodings_ = on;
}

size_t ShardedPipeline::arena_bytes_reserved() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  size_t bytes = 0;
  for (const auto& [key, plan] : plans_) bytes += bytes_reserved(plan->arenas);
  return bytes;
}

Image8 ShardedPipeline::render_preview(const Tensor& latents) const {
  const int h = static_cast<int>(latents.dim(1)), w = static_cast<int>(latents.dim(2));
  if (const auto& tiny = model_->tiny_autoencoder()) {
    const Tensor image = decode_with_tiny_autoencoder(*tiny, latents.slice0(0, 1));
    return to_uint8(image.data(), static_cast<int>(image.dim(1)), static_cast<int>(image.dim(2)));
  }
  return previewer_->render(latents.data(), h, w);
}

const LatentPreview& ShardedPipeline::previewer() {
  if (!previewer_) previewer_ = LatentPreview::fit(model_->vae(), model_->vae().config().scaling_factor);
  return *previewer_;
}

ShardedPipeline::Plan& ShardedPipeline::plan_for(const ResolvedRequest& r, bool* compiled, double* seconds) {
  const std::string key = r.signature.str();
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    *compiled = false;
    *seconds = 0;
    it->second->last_use = ++plan_uses_;
    return *it->second;
  }
  if (plans_.size() >= kMaxCachedPlans) {  // make room: the least recently used plan goes
    auto oldest = std::min_element(plans_.begin(), plans_.end(), [](const auto& a, const auto& b) {
      return a.second->last_use < b.second->last_use;
    });
    plans_.erase(oldest);
  }
  const auto t0 = Clock::now();
  const Signature& s = r.signature;
  auto plan = std::make_unique<Plan>();
  plan->signature = s;
  plan->last_use = ++plan_uses_;
  const SchedulerSemantics semantics =
      s.compat == Compat::Flax ? SchedulerSemantics::Flax : SchedulerSemantics::Diffusers;
  plan->scheduler = Scheduler::create(
      s.scheduler, model_->scheduler_config(s.scheduler, s.timestep_spacing, s.karras_sigmas, s.zero_snr),
      semantics);
  plan->initial_state = s.strength > 0 ? plan->scheduler->set_timesteps_for_strength(s.steps, s.strength)
                                       : plan->scheduler->set_timesteps(s.steps);
  plan->first_call = plan->initial_state.begin_index;
  plan->calls = plan->scheduler->num_model_calls(plan->initial_state);
  plan->init_noise_sigma = plan->scheduler->init_noise_sigma(plan->initial_state);
  plan->numerics.flavour = s.compat == Compat::Flax ? Flavour::Flax : Flavour::Diffusers;

  // Devices side by side, or one after another with all threads? Small networks leave intra-op
  // threads idle (little work per kernel), large ones parallelise well inside each kernel and
  // would multiply activation memory if run side by side.
  const int threads = r.request.threads > 0 ? r.request.threads : hardware_threads();
  const double unet_weights = static_cast<double>(model_->weights_bytes());
  const double latent_pixels = static_cast<double>(r.latent_height) * r.latent_width * s.batch;
  const bool small = unet_weights * latent_pixels < 2.0e12;  // e.g. tiny/demo models
  plan->workers = small ? std::min(s.devices, threads) : 1;
  plan->threads_per_worker = std::max(1, threads / plan->workers);
  for (int w = 0; w < plan->workers; ++w) plan->arenas.push_back(std::make_unique<CachingArena>());

  *compiled = true;
  *seconds = seconds_since(t0);
  return *(plans_[key] = std::move(plan));
}

// ---------------------------------------------------------------------------------------------
// One run: the shared stages of the pipeline family (prompt_encoding.h, latents.h,
// denoise_loop.h, decode.h) over the devices of a plan.

namespace {

// Everything one device carries between the phases of a run.
struct DeviceWork {
  Tensor context;          // (2B or B) × 77 × hidden
  Tensor initial_latents;  // B × C × h × w (NCHW, as drawn)
  Tensor start;            // B × h × w × C: what sampling starts from
  Tensor latents;          // B × h × w × C (NHWC, while sampling)
  Tensor images;           // B × H × W × 3
  InpaintDevice inpaint;   // inpainting: what the loop adds (pipeline/inpaint.h)
  UNetTextTime text_time;  // SDXL: pooled text embeddings and time ids, rows like the context's
  std::vector<double> step_seconds;
};

// Copies every device's images and latents into the result's (D, ...) tensors, and the step times.
void gather(std::vector<DeviceWork>& work, const ResolvedRequest& r, int calls, GenerationResult& result) {
  const Signature& s = r.signature;
  const int D = s.devices, B = s.batch, C = r.latent_channels, h = r.latent_height, w = r.latent_width;
  result.images = Tensor::empty({D, B, s.height, s.width, 3});
  result.initial_latents = Tensor::empty({D, B, C, h, w});
  result.final_latents = Tensor::empty({D, B, C, h, w});
  const int64_t img_n = int64_t{B} * s.height * s.width * 3, lat_n = int64_t{B} * C * h * w;
  std::vector<double> per_step(calls, 0.0);
  double sum = 0;
  for (int d = 0; d < D; ++d) {
    std::memcpy(result.images.data() + d * img_n, work[d].images.data(), sizeof(float) * img_n);
    std::memcpy(result.initial_latents.data() + d * lat_n, work[d].initial_latents.data(), sizeof(float) * lat_n);
    kernels::nhwc_to_nchw(work[d].latents.data(), B, h, w, C, result.final_latents.data() + d * lat_n);
    for (int i = 0; i < calls; ++i) {
      per_step[i] += work[d].step_seconds[i] / D;
      sum += work[d].step_seconds[i];
    }
  }
  result.timings.step = per_step;
  result.timings.mean_step = calls ? sum / (D * calls) : 0;
}

// The request's prompt options, with its embeddings folder read (the options point to the
// vocabulary, the vocabulary into the library: filled in place, never moved).
struct PromptReading {
  TextualInversionLibrary library;
  EmbeddingVocabulary vocabulary;
  PromptOptions options;
  PromptReading() = default;
  PromptReading(const PromptReading&) = delete;
};

void read_prompt_options(const GenerationRequest& request, const StableDiffusionModel& m, PromptReading& p) {
  if (request.comma_backtrack < 0 || request.comma_backtrack >= kChunkTokens)
    fail("comma backtrack ", request.comma_backtrack, " must be in 0..", kChunkTokens - 1);
  p.options = {request.prompt_syntax, request.long_prompts, request.comma_backtrack, nullptr,
               clip_skip_layers(request.clip_skip, m.text_encoder().config())};
  if (!request.embeddings_dir.empty()) {
    p.library = read_textual_inversion_folder(request.embeddings_dir);
    p.vocabulary = EmbeddingVocabulary(p.library, m.tokenizer(), m.text_encoder().config().hidden_size);
    p.options.embeddings = &p.vocabulary;
  }
}

std::vector<GenerationResult::Embedding> used_embeddings(const TokenizedPrompts& tokens,
                                                         const TextualInversionLibrary& library) {
  std::vector<GenerationResult::Embedding> used;
  for (const std::string& name : tokens.embeddings_used)
    for (const auto& e : library.entries)
      if (e.embedding.name == name) used.push_back({name, e.embedding.path.string()});
  return used;
}

// The request's prompts as token ids or layouts; their warnings and embeddings go into `result`.
TokenizedPrompts tokenize_request(const ResolvedRequest& r, const StableDiffusionModel& m, GenerationResult& result) {
  PromptReading reading;
  read_prompt_options(r.request, m, reading);
  TokenizedPrompts tokens = tokenize_prompts(m.tokenizer(), r.prompts, r.negative_prompts, reading.options);
  result.warnings = tokens.warnings;
  result.embeddings = used_embeddings(tokens, reading.library);
  return tokens;
}

// The VAE's tiles for this run (pipeline/tiled_decode.h), or nullopt for a whole decode.
std::optional<VaeTiling> decode_tiling(const ResolvedRequest& r, const StableDiffusionModel& m) {
  if (r.signature.decoder != Decoder::Vae ||
      !vae_decode_uses_tiles(r.request.vae_tiling, r.latent_height, r.latent_width, m.vae_scale_factor(),
                             r.signature.batch))
    return std::nullopt;
  return r.request.vae_tiling;
}

// The prompts of a run as token ids: SD's one tokenizer, or SDXL's two (sdxl_prompt_encoding.h).
struct RunTokens {
  TokenizedPrompts sd;
  std::optional<SdxlTokenizedPrompts> sdxl;
};

// A negative prompt that no UNet pass reads (one pass on the prompts alone) is said, not dropped
// silently.
void warn_unused_negative_prompts(const ResolvedRequest& r, GenerationResult& result) {
  if (r.signature.guidance) return;
  if (std::all_of(r.negative_prompts.begin(), r.negative_prompts.end(), [](const auto& n) { return n.empty(); })) return;
  result.warnings.push_back(r.signature.embedded_guidance
                                ? "the negative prompt is not used: an LCM-distilled UNet takes the guidance as an "
                                  "input and runs one pass on the prompts alone"
                                : "the negative prompt is not used: at guidance <= 1 each step is one pass on the "
                                  "prompts alone");
}

RunTokens tokenize_run(const ResolvedRequest& r, const StableDiffusionModel& m, GenerationResult& result) {
  RunTokens t;
  if (!m.is_sdxl()) {
    t.sd = tokenize_request(r, m, result);
  } else {
    t.sdxl = tokenize_sdxl_request(m, r.request, r.prompts, r.negative_prompts,
                                   sdxl_zeros_for_empty_negative(m, r.signature.compat), result);
    if (r.request.clip_skip != 1)
      result.warnings.push_back(
          cat("clip skip ", r.request.clip_skip,
              " is not applied: SDXL takes its text encoders' penultimate layers, as A1111 does"));
  }
  warn_unused_negative_prompts(r, result);
  return t;
}

// Device d's text conditioning: the context (and SDXL's pooled embeddings and time ids).
void encode_device_prompts_into(const StableDiffusionModel& m, const RunTokens& t, const ResolvedRequest& r, int d,
                                DeviceWork& dw, TextEncodingCache* cache) {
  const Signature& s = r.signature;
  if (!t.sdxl) {
    dw.context = encode_device_prompts(m.text_encoder(), t.sd, d, s.batch, s.guidance, cache);
    return;
  }
  SdxlConditioning c = encode_sdxl_device_prompts(m.text_encoder(), m.text_encoder_2(), *t.sdxl, d, s.batch,
                                                  s.guidance, sdxl_time_ids(r.request.sdxl_size, s.height, s.width),
                                                  cache);
  dw.context = std::move(c.context);
  dw.text_time = std::move(c.text_time);
}

// Device d's images from its final latents (VAE or TAESD; inpainting pastes them into the init image).
void decode_device(const StableDiffusionModel& m, const ResolvedRequest& r, const std::optional<VaeTiling>& tiles,
                   int d, DeviceWork& dw) {
  dw.images = r.signature.decoder == Decoder::Tiny
                  ? decode_with_tiny_autoencoder(*m.tiny_autoencoder(), dw.latents)
                  : decode_with_vae(m.vae(), dw.latents, r.signature.compat, tiles ? &*tiles : nullptr);
  if (r.inpaint.active) paste_inpainted(dw.images, r.inpaint.mask_for(d));
}

// Whether a plan's arenas keep `reserved` bytes of slabs after a phase (sharded_pipeline.h).
bool keeps_activations(const StableDiffusionModel& m, size_t reserved) {
  return m.weights_stay_resident() &&
         static_cast<double>(reserved) <= ShardedPipeline::kKeptActivationsFractionOfRam * physical_memory_bytes();
}

// Runs the phases of one run over its devices. Between phases the component just used is dropped
// from memory (weights in cache files come back from the page cache: StableDiffusionModel::release)
// and the arenas settle (sharded_pipeline.h, "Activation memory"): with weights that stay
// resident the arenas keep their slabs for the next phase and run, within the kept-activations
// budget; else they hand them back, so that only one network's weights and activations are
// resident at a time. The destructor settles the arenas once more, after the run's DeviceWork
// (declared after it) went back to them, however the run ends (done, cancelled, failed).
class RunPhases {
 public:
  RunPhases(const StableDiffusionModel& m, DeviceRunner& devices, std::function<void(Phase)> announce)
      : m_(m), devices_(devices), announce_(std::move(announce)) {}
  ~RunPhases() { settle_arenas(); }
  RunPhases(const RunPhases&) = delete;
  RunPhases& operator=(const RunPhases&) = delete;

  // fn(d) for every device with `component` (if any: TAESD's decode reads none of the model's
  // cached networks) prefetched; the phase's wall time into *seconds.
  void run(std::optional<Phase> announce, std::optional<ModelComponent> component, double* seconds,
           const std::function<void(int)>& fn) {
    const auto t0 = Clock::now();
    if (announce) announce_(*announce);
    if (component) m_.prefetch(*component);
    devices_.for_each_device(fn);
    if (component) m_.release(*component);
    settle_arenas();
    *seconds = seconds_since(t0);
  }

 private:
  void settle_arenas() {
    if (!keeps_activations(m_, devices_.arena_bytes_reserved())) devices_.trim_arenas();
  }

  const StableDiffusionModel& m_;
  DeviceRunner& devices_;
  std::function<void(Phase)> announce_;
};

// The safety checker on each device's decoded images (pipeline/safety_check.h), as the pmapped
// Flax checker runs on its shard; flags device-major into the result.
void check_safety(RunPhases& phases, const std::vector<DeviceWork>& work, const SafetyCheckerComponent& checker,
                  GenerationResult& result) {
  std::vector<std::vector<bool>> flags(work.size());
  phases.run(std::nullopt, std::nullopt, &result.timings.safety_check,
             [&](int d) { flags[d] = check_image_safety(checker, work[d].images).nsfw; });
  for (const auto& f : flags) result.nsfw_flagged.insert(result.nsfw_flagged.end(), f.begin(), f.end());
}

}  // namespace

void ShardedPipeline::release_activations_of_other_plans(const Plan& in_use) {
  for (auto& [key, plan] : plans_)
    if (plan.get() != &in_use) trim(plan->arenas);
}

size_t ShardedPipeline::plans_holding_activations() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  size_t n = 0;
  for (const auto& [key, plan] : plans_) n += bytes_reserved(plan->arenas) > 0;
  return n;
}

double ShardedPipeline::encode_prompts(const GenerationRequest& request, const CancelToken* cancel) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (!reuse_text_encodings_) return 0;
  const ResolvedRequest r = resolve(request);
  const StableDiffusionModel& m = *model_;
  GenerationResult unused;  // tokenize_run's warnings: the run says them
  const Plan& plan = plan_for(r, &unused.compiled, &unused.timings.compile);
  const RunTokens tokens = tokenize_run(r, m, unused);
  release_activations_of_other_plans(plan);
  DeviceRunner devices(r.signature.devices, plan.threads_per_worker, plan.arenas, cancel);
  RunPhases phases(m, devices, [](Phase) {});  // before `work`, as in run()
  std::vector<DeviceWork> work(r.signature.devices);
  double seconds = 0;
  phases.run(std::nullopt, ModelComponent::TextEncoder, &seconds,
             [&](int d) { encode_device_prompts_into(m, tokens, r, d, work[d], &text_cache_); });
  return seconds;
}

GenerationResult ShardedPipeline::run(const GenerationRequest& request, const ProgressCallback& progress,
                                      const PreviewCallback& preview, const CancelToken* cancel) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  const auto t_start = Clock::now();
  const ResolvedRequest r = resolve(request);
  const Signature& s = r.signature;
  const StableDiffusionModel& m = *model_;
  const int B = s.batch;
  auto report = [&](Phase phase, int device = 0, int step = 0, int total = 0, double secs = 0) {
    if (progress) progress({phase, device, step, total, secs});
  };

  GenerationResult result;
  result.signature = s;
  result.prompts = r.prompts;
  result.negative_prompts = r.negative_prompts;
  report(Phase::Compile);
  const Plan& plan = plan_for(r, &result.compiled, &result.timings.compile);
  const bool show_preview = r.request.preview && preview;
  if (show_preview) previewer();
  const int calls_run = plan.calls - plan.first_call;
  result.model_calls = calls_run;
  result.threads_per_device = plan.threads_per_worker;
  result.concurrent_devices = plan.workers;
  const RunTokens tokens = tokenize_run(r, m, result);
  result.device_keys = r.request.device_keys.empty()
                           ? jax::split(jax::prng_key(r.request.seed), s.devices, r.request.rng)
                           : r.request.device_keys;

  release_activations_of_other_plans(plan);
  DeviceRunner devices(s.devices, plan.threads_per_worker, plan.arenas, cancel);
  RunPhases phases(m, devices, [&](Phase p) { report(p); });  // before `work`: see RunPhases
  std::vector<DeviceWork> work(s.devices);
  phases.run(Phase::TextEncode, ModelComponent::TextEncoder, &result.timings.text_encode,
             [&](int d) {
               encode_device_prompts_into(m, tokens, r, d, work[d], reuse_text_encodings_ ? &text_cache_ : nullptr);
             });
  for (const DeviceWork& dw : work) result.context_tokens.push_back(static_cast<int>(dw.context.dim(1)));
  if (!r.init_images.empty()) {  // image-to-image: the VAE encoder makes the start
    phases.run(std::nullopt, ModelComponent::Vae, &result.timings.encode_image, [&](int d) {
      device_start(r, plan, result.device_keys[d], d, &work[d].initial_latents, &work[d].start, &work[d].inpaint);
    });
  }
  const DenoiseSetup setup = denoise_setup(plan, r);
  phases.run(std::nullopt, ModelComponent::UNet, &result.timings.denoise, [&](int d) {
    DeviceWork& dw = work[d];
    if (r.init_images.empty())
      device_start(r, plan, result.device_keys[d], d, &dw.initial_latents, &dw.start, nullptr);
    auto observe = [&](int i, double seconds, const Tensor& x) {
      dw.step_seconds.push_back(seconds);
      report(Phase::Denoise, d, i + 1 - plan.first_call, calls_run, seconds);
      if (show_preview) preview(d, i + 1 - plan.first_call, render_preview(x));
    };
    DenoiseSetup device_setup = setup;  // with this device's control images
    device_setup.residuals = controlnet_residuals(r.request.controlnets, d, B, s.guidance, plan.first_call, plan.calls,
                                                  plan.numerics, tokens.sdxl ? &dw.text_time : nullptr);
    DenoiseHooks hooks = r.inpaint.active
                             ? inpaint_hooks(dw.inpaint, *plan.scheduler, plan.initial_state, plan.calls)
                             : DenoiseHooks{};
    if (tokens.sdxl) hooks.text_time = &dw.text_time;
    dw.latents = denoise(device_setup, std::move(dw.start), dw.context,
                         device_step_noise(r, plan, result.device_keys[d], d), observe, hooks);
  });
  result.vae_tiles = decode_tiling(r, m);
  const auto decoder_weights =
      s.decoder == Decoder::Tiny ? std::nullopt : std::optional<ModelComponent>(ModelComponent::Vae);
  phases.run(Phase::Decode, decoder_weights, &result.timings.decode, [&](int d) {
    decode_device(m, r, result.vae_tiles, d, work[d]);
    report(Phase::Decode, d);
  });

  if (r.request.safety_checker && m.safety_checker()) check_safety(phases, work, *m.safety_checker(), result);
  gather(work, r, calls_run, result);  // outside the arenas: results outlive the plan's memory
  work.clear();                         // return the activations to the arenas now
  result.timings.total = seconds_since(t_start);
  result.peak_rss_bytes = peak_rss_bytes();
  report(Phase::Done);
  return result;
}

void ShardedPipeline::device_start(const ResolvedRequest& r, const Plan& plan, const jax::Key& key, int d,
                                   Tensor* noise, Tensor* start, InpaintDevice* inpaint) const {
  const Shape shape{r.signature.batch, r.latent_channels, r.latent_height, r.latent_width};
  *noise = device_initial_noise(r.request.latents, key, r.request.rng, d, shape);
  if (r.init_images.empty()) {
    *start = to_sampling_layout(*noise, static_cast<float>(plan.init_noise_sigma));
    return;
  }
  const Tensor eps = device_posterior_noise(r.request.posterior_noise, key, r.request.rng, d, shape);
  if (r.inpaint.active) {
    *inpaint = start_inpaint_device(inpaint_start_inputs(r, plan, key, d, *noise, eps), start);
    return;
  }
  const Tensor image_latents =
      sample_image_latents(model_->vae(), device_init_images(r.init_images, d, r.signature.batch), eps);
  *start = noised_start_latents(*plan.scheduler, plan.initial_state, image_latents, *noise, r.signature.compat);
}

InpaintStartInputs ShardedPipeline::inpaint_start_inputs(const ResolvedRequest& r, const Plan& plan,
                                                         const jax::Key& key, int d, const Tensor& noise,
                                                         const Tensor& image_eps) const {
  InpaintStartInputs in;
  in.vae = &model_->vae();
  in.scheduler = plan.scheduler.get();
  in.state = &plan.initial_state;
  in.compat = r.signature.compat;
  in.strength = r.signature.strength;
  in.mode = r.inpaint.mode;
  in.images = device_init_images(r.init_images, d, r.signature.batch);
  in.noise = noise;
  in.image_eps = image_eps;
  if (in.mode == InpaintMode::UNetChannels) {  // Flax: prng_seed, mask_prng_seed = split(prng_seed)
    const jax::Key mask_key = jax::split(key, 2, r.request.rng)[1];
    in.masked_eps = device_posterior_noise(r.request.masked_posterior_noise, mask_key, r.request.rng, d, noise.shape());
  }
  in.mask = &r.inpaint.mask_for(d);
  return in;
}

StepNoise ShardedPipeline::device_step_noise(const ResolvedRequest& r, const Plan& plan, const jax::Key& key,
                                             int d) const {
  StepNoise noise{key, r.request.rng, nullptr};
  if (const auto& given = r.request.step_noise) {
    const Signature& s = r.signature;
    const Shape expected{s.devices, plan.calls - plan.first_call, s.batch, r.latent_channels, r.latent_height,
                         r.latent_width};
    if (given->shape() != expected)
      fail("the given step noise has shape ", shape_str(given->shape()), "; this run needs ", shape_str(expected),
           " (devices, UNet calls, batch, channels, height, width)");
    noise.injected = given->data() + d * (given->numel() / s.devices);
    noise.injected_first_call = plan.first_call;
  }
  return noise;
}

DenoiseSetup ShardedPipeline::denoise_setup(const Plan& plan, const ResolvedRequest& r) const {
  DenoiseSetup setup;
  setup.unet = &model_->unet();
  setup.scheduler = plan.scheduler.get();
  setup.initial_state = &plan.initial_state;
  setup.calls = plan.calls;
  setup.first_call = plan.first_call;
  setup.numerics = plan.numerics;
  setup.guidance = r.signature.embedded_guidance ? GuidanceKind::Embedded
                   : r.signature.guidance         ? GuidanceKind::ClassifierFree
                                                  : GuidanceKind::None;
  setup.guidance_scale = r.request.guidance_scale;
  setup.guidance_rescale = r.request.guidance_rescale;
  return setup;
}

// ---------------------------------------------------------------------------------------------

Decoder parse_decoder_name(const std::string& name) {
  if (name == "vae") return Decoder::Vae;
  if (name == "taesd" || name == "tiny") return Decoder::Tiny;
  fail("unknown decoder '", name, "' (expected 'vae' or 'taesd')");
}

std::string decoder_name(Decoder d) { return d == Decoder::Vae ? "vae" : "taesd"; }

Compat parse_compat(const std::string& name) {
  if (name == "flax") return Compat::Flax;
  if (name == "diffusers") return Compat::Diffusers;
  fail("unknown compatibility mode '", name, "' (expected 'flax' or 'diffusers')");
}

std::string compat_name(Compat c) { return c == Compat::Flax ? "flax" : "diffusers"; }

ComputeDType parse_dtype_name(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32") return ComputeDType::F32;
  if (name == "bf16" || name == "bfloat16") return ComputeDType::BF16;
  fail("unknown dtype '", name, "' (expected 'f32' or 'bf16')");
}

std::string dtype_display_name(ComputeDType d) { return d == ComputeDType::F32 ? "f32" : "bf16"; }

}  // namespace octodiff
