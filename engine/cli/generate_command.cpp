// octodiff-cli generate: the sharded text-to-image pipeline from the command line.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <random>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "controlnet_options.h"
#include "generate_outputs.h"
#include "core/device.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/png.h"
#include "pipeline/few_step.h"
#include "pipeline/lora.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "ranks.h"
#include "sheet_command.h"
#include "sweep_command.h"

namespace octodiff::cli {

const char* kGenerateUsage =
    "usage: octodiff-cli generate [options]\n"
    "  --prompt TEXT             a prompt (repeat up to 8 times; one device per prompt)\n"
    "  --negative-prompt TEXT    negative prompt for every image (default: empty)\n"
    "  --prompt-syntax plain|a1111  plain text (default, the Flax pipeline's) or A1111's emphasis\n"
    "                            syntax: (word) x1.1, ((word)) x1.21, (word:1.3), [word] /1.1,\n"
    "                            \\( \\) \\[ \\] literal brackets, BREAK starts a new 75-token chunk\n"
    "  --long-prompts truncate|chunk  truncate: one 77-token window with a warning (default);\n"
    "                            chunk: every token, 75 per chunk, concatenated (A1111/ComfyUI)\n"
    "  --comma-backtrack N       chunking: move the words after a comma at most N tokens back\n"
    "                            to the next chunk (A1111's setting; default 0 = off, A1111: 20)\n"
    "  --clip-skip N             the prompts' embeddings from the text encoder's N-th last layer\n"
    "                            (A1111's \"Clip skip\"; default 1 = the last; 2 for models trained\n"
    "                            on NovelAI's; diffusers' clip_skip is N-1); SD 1.x/2.x (SDXL keeps\n"
    "                            its penultimate layers, as in A1111)\n"
    "  --embeddings DIR          textual-inversion embeddings (DIR/NAME.safetensors), called by\n"
    "                            NAME in prompts and negative prompts\n"
    "  --model PATH              diffusers folder or single-file .safetensors (default: the\n"
    "                            embedded demo model)\n"
    "  --tokenizer DIR           folder with vocab.json + merges.txt (single-file checkpoints)\n"
    "  --lora FILE[:STRENGTH]    merge a LoRA (.safetensors: kohya, diffusers/PEFT) into the model\n"
    "                            at load, strength default 1 (repeat for several)\n"
    "  --lora-dir DIR            folder for the prompt syntax <lora:NAME> / <lora:NAME:STRENGTH>\n"
    "                            (DIR/NAME.safetensors; the tags are removed from the prompts and\n"
    "                            the LoRAs apply to every image)\n"
    "  --seed N|random           PRNGKey seed (default 0)\n"
    "  --steps N                 denoising steps (default 50; a few-step model's own: LCM-\n"
    "                            distilled 4, LCM scheduler 4, Turbo-style 1)\n"
    "  --guidance G              classifier-free guidance scale (default 7.5; LCM-distilled 8,\n"
    "                            LCM scheduler 1.5, Turbo-style 0); at <= 1 one pass\n"
    "                            on the prompts alone (SD-Turbo: --guidance 0); an LCM-distilled\n"
    "                            UNet takes it as its guidance embedding, one pass per step\n"
    "  --scheduler NAME          pndm, ddim, lms, dpm++, euler, euler-a (Euler ancestral),\n"
    "                            lcm, dpm++-sde (DPM++ 2M SDE) (default: the model's own: its\n"
    "                            scheduler_config.json class, PNDM for single-file checkpoints)\n"
    "  --timestep-spacing S      leading, linspace or trailing (default: the scheduler\n"
    "                            config's; LCM has none)\n"
    "  --karras-sigmas on|off    Karras sigmas for lms, euler, dpm++ and dpm++-sde (A1111's\n"
    "                            'DPM++ 2M Karras'; default: the scheduler config's\n"
    "                            use_karras_sigmas)\n"
    "  --zero-snr on|off         zero terminal SNR noise schedule (diffusers' rescale_betas_zero_snr,\n"
    "                            A1111's 'Zero Terminal SNR'; for models trained with it) with ddim,\n"
    "                            euler, euler-a, dpm++, dpm++-sde, lcm (default: the scheduler config's)\n"
    "  --guidance-rescale PHI    rescale the guided noise toward the prompt's standard deviation,\n"
    "                            0..1 (diffusers' guidance_rescale, A1111's 'CFG Rescale phi';\n"
    "                            default 0 = off; 0.7 for zero-SNR models)\n"
    "  --height H --width W      image size (default: the model's)\n"
    "  --taesd PATH              a tiny autoencoder (TAESD: diffusers AutoencoderTiny folder or\n"
    "                            taesd_decoder.safetensors) loaded beside the model\n"
    "  --decoder vae|taesd       what decodes the final images (default: taesd when --taesd is\n"
    "                            given, else the model's VAE)\n"
    "  --vae-tiling auto|on|off  decode the VAE layer by layer, each layer in tiles (less memory;\n"
    "                            the whole decode's image to float32 rounding): auto (default)\n"
    "                            only when a whole decode would take over a quarter of the RAM\n"
    "                            (~2.5 kB per pixel), on whenever the image is larger than a tile\n"
    "  --vae-tile PX             every decoder layer runs in tiles of PX/8 of its own pixels\n"
    "                            (default 512; a multiple of the VAE's 8)\n"
    "  --vae-tile-overlap PX     accepted for older command lines, unused: tiles are exact\n"
    "  --devices D               devices (default: number of prompts / batch per device)\n"
    "  --batch-per-device B      images per device (default 1)\n"
    "  --compat flax|diffusers   pipeline semantics (default flax)\n"
    "  --original-size WxH --crop-top-left TOP,LEFT --target-size WxH\n"
    "                            SDXL with --compat diffusers: the size conditioning (diffusers'\n"
    "                            original_size, crops_coords_top_left, target_size; default: the\n"
    "                            image size, 0,0 and the image size, as Flax always has it)\n"
    "  --rng classic|partitionable   JAX PRNG scheme (default classic = JAX <= 0.4)\n"
    "  --dtype f32|bf16          compute dtype of UNet and VAE (default f32); bf16 loads their\n"
    "                            weights as bfloat16 (a guided run's first UNet call keeps its\n"
    "                            activations to ~16 bits, at twice a bf16 call's time; the VAE\n"
    "                            stays f32 where bf16 products are no faster: a note says so)\n"
    "  --threads N               CPU threads (default: all)\n"
    "  --latents FILE.npy        initial latents, float32 (D, B, 4, h, w)\n"
    "  --save-latents FILE.npy   write the initial latents drawn from the seed\n"
    "  --init-image FILE.png     image-to-image from this image (repeat: one per device); its\n"
    "                            sides are floored to a multiple of 32 (flax) or 8 (diffusers) and\n"
    "                            it is resized to that with Lanczos; it sets the size\n"
    "  --strength S              image-to-image: the fraction of the steps run, in (0, 1] (default 0.8)\n"
    "  --noise FILE.npy          image-to-image: the noise added to the image latents, float32\n"
    "                            (D, B, 4, h, w) (the same array as --latents)\n"
    "  --posterior-noise FILE.npy  image-to-image: the eps of the VAE posterior sample, float32\n"
    "                            (D, B, 4, h, w) (default: drawn from the device key, as Flax)\n"
    "  --mask FILE.png           inpaint: repaint the white area of the init image (repeat: one per\n"
    "                            device; the init image's size); 9-channel inpainting models take\n"
    "                            it as their input, other models blend the init image outside it\n"
    "                            after every step; --strength defaults to 1 (start from noise)\n"
    "  --mask-blur PX            inpaint: Gaussian blur of the mask (sigma PX pixels, as A1111's\n"
    "                            'Mask blur'), pasted over the init image with it (default 0)\n"
    "  --inpaint-area whole|masked  inpaint the whole picture (default) or only the mask's box\n"
    "                            (plus padding, at the full size, pasted back)\n"
    "  --inpaint-padding PX      pixels around the mask's box with --inpaint-area masked (default 32)\n"
    "  --masked-posterior-noise FILE.npy  9-channel inpaint: the eps of the masked image's VAE\n"
    "                            posterior sample, float32 (D, B, 4, h, w)\n"
    "  --save-array FILE.npy     write the images as float32 (D, B, H, W, 3) in [0, 1]\n"
    "  --out FILE.png            the grid (2x4 for eight images; default octodiff-<seed>.png)\n"
    "  --out-dir DIR             also write every image as its own PNG\n"
    "  --scale N                 enlarge the saved PNGs N times (nearest neighbour; for small models)\n"
    "  --repeat N                call the pipeline N times (the first call compiles)\n"
    "  --no-safety-checker       do not load or run the model folder's safety_checker/ (run by\n"
    "                            default when present, as the Flax pipeline does; a flagged image\n"
    "                            is kept, reported here and in its PNG metadata, not blacked out)\n"
    "  --json                    settings and timings as JSON on stdout\n"
    "  --quiet                   no progress output\n";

namespace {

// Which images the safety checker flagged (pipeline/safety_check.h); nothing when none ran.
void print_safety_verdict(FILE* info, const GenerationResult& result) {
  if (result.nsfw_flagged.empty()) return;
  std::string flagged;
  for (size_t i = 0; i < result.nsfw_flagged.size(); ++i)
    if (result.nsfw_flagged[i]) flagged += (flagged.empty() ? "" : ", ") + std::to_string(i + 1);
  if (flagged.empty())
    std::fprintf(info, "  safety checker: no image flagged (%.2f s)\n", result.timings.safety_check);
  else
    std::fprintf(info, "  safety checker: flagged image%s %s of %zu (kept, not blacked out; marked in the PNG "
                 "metadata) (%.2f s)\n", flagged.find(',') == std::string::npos ? "" : "s", flagged.c_str(),
                 result.nsfw_flagged.size(), result.timings.safety_check);
}

nlohmann::json timings_json(const GenerationResult& r) {
  return {{"compiled", r.compiled},
          {"compile_seconds", r.timings.compile},
          {"text_encode_seconds", r.timings.text_encode},
          {"denoise_seconds", r.timings.denoise},
          {"mean_step_seconds", r.timings.mean_step},
          {"step_seconds", r.timings.step},
          {"encode_image_seconds", r.timings.encode_image},
          {"decode_seconds", r.timings.decode},
          {"total_seconds", r.timings.total},
          {"model_calls_per_device", r.model_calls},
          {"concurrent_devices", r.concurrent_devices},
          {"threads_per_device", r.threads_per_device},
          {"peak_rss_mb", static_cast<double>(r.peak_rss_bytes) / (1024.0 * 1024.0)}};
}

// --lora FILE[:STRENGTH] (repeatable) and the prompts' <lora:NAME:STRENGTH> tags against
// --lora-dir; the tags are removed from req.prompts. A file given both ways must have one strength.
std::vector<LoraSpec> lora_options(const Args& args, GenerationRequest& req) {
  std::vector<LoraSpec> loras;
  for (const auto& text : args.all("lora")) loras.push_back(parse_lora_argument(text));
  PromptLoras tagged = extract_prompt_loras(req.prompts, args.get_or("lora-dir", ""));
  req.prompts = tagged.prompts;
  for (const LoraSpec& t : tagged.loras) {
    auto same = std::find_if(loras.begin(), loras.end(), [&](const LoraSpec& l) {
      std::error_code ec;
      return std::filesystem::equivalent(l.path, t.path, ec);
    });
    if (same == loras.end()) {
      loras.push_back(t);
    } else if (same->strength != t.strength) {
      fail("LoRA '", t.path.string(), "' is given with strength ", same->strength, " (--lora) and ", t.strength,
           " (in a prompt)");
    }
  }
  return loras;
}

// --init-image (repeatable), --strength, --noise, --posterior-noise.
void image_to_image_options(const Args& args, GenerationRequest& req) {
  for (const auto& path : args.all("init-image")) req.init_images.push_back(read_png(path));
  const bool image_options = args.get("strength") || args.get("noise") || args.get("posterior-noise");
  if (req.init_images.empty()) {
    if (image_options) fail("--strength, --noise and --posterior-noise need --init-image");
    return;
  }
  req.strength = args.get_double("strength", 0.8);
  if (auto p = args.get("noise")) {
    if (req.latents) fail("give the image-to-image noise once: --noise or --latents, not both");
    req.latents = read_npy(*p);
  }
  if (auto p = args.get("posterior-noise")) req.posterior_noise = read_npy(*p);
}

// "A<sep>B" as two non-negative integers (e.g. "1024x768", "0,64").
std::pair<int, int> int_pair(const Args& args, const char* name, char sep) {
  const std::string text = *args.get(name);
  const size_t at = text.find(sep);
  try {
    if (at == std::string::npos) throw std::invalid_argument(text);
    size_t used_a = 0, used_b = 0;
    const int a = std::stoi(text.substr(0, at), &used_a), b = std::stoi(text.substr(at + 1), &used_b);
    if (used_a != at || used_b != text.size() - at - 1 || a < 0 || b < 0 || a > 65536 || b > 65536)
      throw std::invalid_argument(text);
    return {a, b};
  } catch (const std::exception&) {
    fail("--", name, " expects two non-negative integers as A", sep, "B, got '", text, "'");
  }
}

// --original-size WxH, --crop-top-left TOP,LEFT, --target-size WxH (SDXL, diffusers compat).
void sdxl_size_options(const Args& args, GenerationRequest& req) {
  SdxlSizeConditioning& s = req.sdxl_size;
  if (args.get("original-size")) std::tie(s.original_width, s.original_height) = int_pair(args, "original-size", 'x');
  if (args.get("crop-top-left")) std::tie(s.crop_top, s.crop_left) = int_pair(args, "crop-top-left", ',');
  if (args.get("target-size")) std::tie(s.target_width, s.target_height) = int_pair(args, "target-size", 'x');
}

void prompt_options(const Args& args, GenerationRequest& req) {
  req.prompt_syntax = parse_prompt_syntax(args.get_or("prompt-syntax", "plain"));
  req.long_prompts = parse_long_prompts(args.get_or("long-prompts", "truncate"));
  req.comma_backtrack = args.get_int("comma-backtrack", 0, 0, kChunkTokens - 1);
  // The pipeline checks it against the model's text encoder too.
  req.clip_skip = args.get_int("clip-skip", 1, 1, kMaxClipSkip);
  req.embeddings_dir = args.get_or("embeddings", "");
}

// --mask (repeatable), --mask-blur, --inpaint-area, --inpaint-padding, --masked-posterior-noise.
void inpaint_options(const Args& args, GenerationRequest& req) {
  for (const auto& path : args.all("mask")) req.masks.push_back(read_png(path));
  const bool options = args.get("mask-blur") || args.get("inpaint-area") || args.get("inpaint-padding") ||
                       args.get("masked-posterior-noise");
  if (req.masks.empty()) {
    if (options) fail("--mask-blur, --inpaint-area, --inpaint-padding and --masked-posterior-noise need --mask");
    return;
  }
  if (req.init_images.empty()) fail("--mask needs --init-image (the image whose white mask area is repainted)");
  if (!args.get("strength")) req.strength = 1.0;  // diffusers' inpainting default; the Flax pipeline's only mode
  req.mask_blur = args.get_int("mask-blur", 0, 0, 1024);
  const std::string area = args.get_or("inpaint-area", "whole");
  if (area != "whole" && area != "masked") fail("--inpaint-area must be 'whole' or 'masked', got '", area, "'");
  req.inpaint_only_masked = area == "masked";
  req.only_masked_padding = args.get_int("inpaint-padding", 32, 0, 4096);
  if (auto p = args.get("masked-posterior-noise")) req.masked_posterior_noise = read_npy(*p);
}

// --vae-tiling, --vae-tile and --vae-tile-overlap (image pixels, a multiple of `scale`).
void vae_tiling_options(const Args& args, GenerationRequest& req, int scale) {
  req.vae_tiling.mode = parse_vae_tiling_mode(args.get_or("vae-tiling", "auto"));
  auto latent_pixels = [&](const char* name, int fallback) {
    const int px = args.get_int(name, fallback * scale, 1, 1 << 16);
    if (px % scale) fail("--", name, " ", px, " is not a multiple of the VAE's scale factor ", scale);
    return px / scale;
  };
  req.vae_tiling.tile = latent_pixels("vae-tile", req.vae_tiling.tile);
  req.vae_tiling.overlap = latent_pixels("vae-tile-overlap", req.vae_tiling.overlap);
  check_vae_tiling(req.vae_tiling);
}

// The command line: every option `generate` takes, for the grid, a sheet and a sweep.
Args generate_args(const std::vector<std::string>& argv) {
  // clang-format off
  return Args(argv,
              {"negative-prompt", "model", "tokenizer", "seed", "steps", "guidance", "scheduler", "timestep-spacing",
               "karras-sigmas", "zero-snr", "guidance-rescale", "height", "width",
               "devices", "batch-per-device", "compat", "rng", "dtype", "threads", "latents", "save-latents",
               "save-array", "out", "out-dir", "repeat", "scale", "lora-dir", "taesd", "decoder", "strength", "noise",
               "posterior-noise", "prompt-syntax", "long-prompts", "comma-backtrack", "clip-skip", "embeddings",
               "mask-blur", "inpaint-area", "inpaint-padding", "masked-posterior-noise", "control-preprocess",
               "control-start", "control-end", "x", "y", "z", "seeds", "prompts-file", "mpi-timeout",
               "vae-tiling", "vae-tile", "vae-tile-overlap", "original-size", "crop-top-left", "target-size"},
              {"json", "quiet", "help", "no-safety-checker"}, {"prompt", "lora", "init-image", "mask", "controlnet", "control-image"});
  // clang-format on
}

// The request the options describe, before the model loads (its LoRA tags are still in the
// prompts: load_options_from_args takes them out; the VAE tiling needs the model's scale factor).
GenerationRequest request_from_args(const Args& args, Ranks& ranks, bool sweep) {
  GenerationRequest req;
  req.prompts = sweep ? sweep_prompt_list(ranks, args) : args.all("prompt");
  if (req.prompts.empty()) fail("give at least one --prompt");
  if (!sweep && req.prompts.size() > 8) fail(req.prompts.size(), " prompts given; at most 8 (one per device of the 2x4 grid)");
  if (auto n = args.get("negative-prompt")) req.negative_prompts = {*n};
  prompt_options(args, req);
  const std::string seed = args.get_or("seed", "0");
  if (seed == "random") {
    req.seed = rank0_value(ranks, static_cast<int64_t>(std::random_device{}() & 0x7fffffff));
  } else {
    req.seed = args.get_int64("seed", 0);
  }
  req.steps = args.get_int("steps", 50, 1, 1000);
  req.guidance_scale = args.get_double("guidance", 7.5);
  if (auto name = args.get("scheduler")) req.scheduler = parse_scheduler_kind(*name);
  if (auto name = args.get("timestep-spacing")) req.timestep_spacing = parse_timestep_spacing(*name);
  if (auto value = args.get("karras-sigmas")) {
    if (*value != "on" && *value != "off") fail("--karras-sigmas expects on or off, got '", *value, "'");
    req.karras_sigmas = *value == "on";
  }
  if (auto value = args.get("zero-snr")) {
    if (*value != "on" && *value != "off") fail("--zero-snr expects on or off, got '", *value, "'");
    req.zero_snr = *value == "on";
  }
  req.guidance_rescale = args.get_double("guidance-rescale", 0.0);
  req.height = args.get_int("height", 0, 1, 1 << 16);
  req.width = args.get_int("width", 0, 1, 1 << 16);
  req.devices = args.get_int("devices", 0, 1, 64);
  req.batch_per_device = args.get_int("batch-per-device", 1, 1, 64);
  req.compat = parse_compat(args.get_or("compat", "flax"));
  sdxl_size_options(args, req);
  req.rng = jax::parse_rng_scheme(args.get_or("rng", "classic"));
  req.dtype = parse_dtype_name(args.get_or("dtype", "f32"));
  req.threads = args.get_int("threads", 0, 1, 1024);
  if (auto p = args.get("latents")) req.latents = read_npy(*p);
  image_to_image_options(args, req);
  inpaint_options(args, req);
  controlnet_options(args, req);  // after --dtype: the ControlNets are packed in it
  req.safety_checker = !args.flag("no-safety-checker");
  return req;
}

// How the model loads: --tokenizer, the request's dtype and safety checker, --lora and the
// prompts' LoRA tags (removed from req.prompts), --taesd; sets req.decoder (--decoder).
ModelLoadOptions load_options_from_args(const Args& args, GenerationRequest& req) {
  ModelLoadOptions load;
  load.load_vae_encoder = !req.init_images.empty();
  if (auto t = args.get("tokenizer")) load.tokenizer_dir = *t;
  load.dtype = req.dtype;  // weights are packed in the compute dtype at load
  load.load_safety_checker = req.safety_checker;
  load.loras = lora_options(args, req);
  if (auto t = args.get("taesd")) load.tiny_autoencoder = *t;
  req.decoder = parse_decoder_name(args.get_or("decoder", load.tiny_autoencoder ? "taesd" : "vae"));
  return load;
}

// A few-step model's steps, guidance and scheduler, a zero-SNR model's guidance rescale
// (pipeline/few_step.h), where the command line gives none; says so on `info` unless quiet.
void few_step_defaults(const Args& args, GenerationRequest& req, const StableDiffusionModel& model, FILE* info,
                       bool quiet) {
  const FewStepSampling p = recognize_few_step(model);
  if (p.values.guidance_rescale > 0 && !args.get("guidance-rescale")) {
    req.guidance_rescale = p.values.guidance_rescale;
    if (!quiet)
      std::fprintf(info,
                   "zero terminal SNR model: guidance rescale %g (recommended for it; --guidance-rescale "
                   "overrides)\n",
                   req.guidance_rescale);
  }
  if (p.kind == FewStepKind::None) return;
  if (!args.get("steps")) req.steps = p.values.steps;
  if (!args.get("guidance")) req.guidance_scale = p.values.guidance;
  if (!args.get("scheduler") && p.values.scheduler) req.scheduler = p.values.scheduler;
  if (quiet) return;
  std::fprintf(info, "few-step model (%s): %d step%s, guidance %g%s%s\n", few_step_description(p.kind), req.steps,
               req.steps == 1 ? "" : "s", req.guidance_scale,
               req.scheduler ? (", " + sampler_display_name(*req.scheduler)).c_str() : "",
               args.get("steps") || args.get("guidance") || args.get("scheduler")
                   ? " (given on the command line where named)"
                   : " (the model's defaults; --steps, --guidance, --scheduler override)");
}

// The model's notes from notes[from] on, on stderr; returns how many notes it has.
size_t print_load_notes(const StableDiffusionModel& model, size_t from) {
  const auto notes = model.load_notes();
  for (size_t i = from; i < notes.size(); ++i) std::fprintf(stderr, "octodiff-cli: note: %s\n", notes[i].c_str());
  return notes.size();
}

// What the grid run takes beside the request and the model.
struct GridRun {
  FILE* info = stdout;        // progress and summaries (stderr with --json, /dev/null on ranks > 0)
  bool json_out = false, quiet = false;
  int repeat = 1, scale = 1;  // --repeat, --scale
  double load_seconds = 0;
  size_t notes_at_load = 0;   // the load notes already printed
};

// The model, its safety checker, ControlNets and LoRAs, and the run's signature and scheduler.
void print_run_header(FILE* info, const StableDiffusionModel& model, const GenerationRequest& req,
                      const ResolvedRequest& resolved, double load_seconds, bool models_own_scheduler) {
  std::fprintf(info, "model: %s (%s), loaded in %.2f s\n", model.path().string().c_str(),
               model.description().c_str(), load_seconds);
  if (const auto& checker = model.safety_checker())
    std::fprintf(info, "safety checker: %s (%s)\n", checker->files.front().string().c_str(), checker->format.c_str());
  for (const ControlNetUse& c : req.controlnets)
    std::fprintf(info, "controlnet: %s (%s) scale %g, steps %g..%g\n", c.name.c_str(), c.preprocessor.c_str(), c.scale,
                 c.guidance_start, c.guidance_end);
  for (const AppliedLora& l : model.loras())
    std::fprintf(info, "lora: %s (%s) strength %g: %d UNet and %d text-encoder weights%s\n", l.spec.path.string().c_str(),
                 l.format.c_str(), static_cast<double>(l.spec.strength), l.unet_layers, l.text_encoder_layers,
                 model.is_sdxl() ? cat(", ", l.text_encoder_2_layers, " of text_encoder_2").c_str() : "");
  std::fprintf(info, "signature: %s, seed %lld, rng %s\n", resolved.signature.str().c_str(),
               static_cast<long long>(req.seed), jax::rng_scheme_name(req.rng).c_str());
  std::fprintf(info, "scheduler: %s (%s)%s, timestep spacing %s%s\n",
               scheduler_name(resolved.signature.scheduler).c_str(),
               scheduler_class_name(resolved.signature.scheduler).c_str(),
               models_own_scheduler ? ", the model's own" : "",
               timestep_spacing_name(resolved.signature.timestep_spacing).c_str(),
               resolved.signature.karras_sigmas ? ", Karras sigmas" : "");
  if (resolved.signature.zero_snr) std::fprintf(info, "noise schedule: zero terminal SNR\n");
  if (req.guidance_rescale > 0)
    std::fprintf(info, "guidance rescale: %g%s\n", req.guidance_rescale,
                 resolved.signature.guidance ? "" : " (unused: no classifier-free guidance in this run)");
}

// Call k's summary: compile, the phases' times, warnings and the safety checker's verdict.
void print_call(FILE* info, int k, const GenerationResult& result, const ResolvedRequest& resolved) {
  const Timings& t = result.timings;
  if (result.compiled)
    std::fprintf(info, "call %d: compiled the plan in %.3f s, then ran\n", k + 1, t.compile);
  else
    std::fprintf(info, "call %d: cached plan, no compile\n", k + 1);
  std::fprintf(info,
               "  inference %.2f s: text encoding %.2f s, denoising %.2f s (%d UNet calls × %d device%s, %.3f "
               "s/step), decoding %.2f s\n",
               t.total - t.compile, t.text_encode, t.denoise, result.model_calls, resolved.signature.devices,
               resolved.signature.devices == 1 ? "" : "s", t.mean_step, t.decode);
  for (const auto& w : result.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  print_safety_verdict(info, result);
}

// The pipeline called --repeat times (under mpirun the devices split over the ranks; rank 0
// gathers, ranks.h); *runs gets every call's timings. The last call's result; nullopt on ranks > 0.
std::optional<GenerationResult> run_calls(Ranks& ranks, ShardedPipeline& pipe, const GenerationRequest& req,
                                          const ResolvedRequest& resolved, const GridRun& g, nlohmann::json* runs,
                                          nlohmann::json* rank_json) {
  // A live progress line on a terminal; logs and pipes get the summaries only.
  ProgressCallback progress;
  if (!g.quiet && isatty(STDERR_FILENO)) {
    progress = [&](const ProgressEvent& e) {
      if (e.phase == Phase::Denoise)
        std::fprintf(stderr, "\r  device %d/%d  step %d/%d  %.2f s/step   ", e.device + 1,
                     resolved.signature.devices, e.step, e.total_steps, e.seconds);
    };
  }
  GenerationResult result;
  for (int k = 0; k < g.repeat; ++k) {
    if (ranks.many()) {
      std::optional<GenerationResult> gathered = run_devices_on_ranks(ranks, pipe, resolved, g.quiet, rank_json);
      if (!gathered) return std::nullopt;
      result = std::move(*gathered);
    } else {
      result = pipe.run(req, progress);
    }
    if (progress) std::fprintf(stderr, "\r%60s\r", "");
    print_call(g.info, k, result, resolved);
    runs->push_back(timings_json(result));
  }
  return result;
}

// One generation (--repeat calls) written as a grid PNG (and --out-dir, --save-latents,
// --save-array), with --json's report.
int run_grid(const Args& args, Ranks& ranks, const GenerationRequest& req,
             const std::shared_ptr<const StableDiffusionModel>& model, const GridRun& g) {
  // The metadata needs the weights' SHA-256 (seconds for a 4 GB file, cached afterwards): hash
  // while the pipeline runs.
  auto hashing = std::async(std::launch::async, [model, &ranks] { return ranks.leader() ? model->model_hash() : ""; });
  ShardedPipeline pipe(model);
  const ResolvedRequest resolved = pipe.resolve(req);  // fail fast, before any output
  const std::string out = args.get_or("out", "octodiff-" + std::to_string(req.seed) + ".png");
  const bool models_own_scheduler = resolved.signature.scheduler == model->default_scheduler();
  print_run_header(g.info, *model, req, resolved, g.load_seconds, models_own_scheduler);

  nlohmann::json runs = nlohmann::json::array(), rank_json;
  const std::optional<GenerationResult> result = run_calls(ranks, pipe, req, resolved, g, &runs, &rank_json);
  if (!result) return 0;

  hashing.wait();
  const nlohmann::json outputs = write_generate_outputs(args, out, req, *result, *model, g.scale, g.info);
  // A first load's weight cache is written in the background: let it finish (the next run then
  // maps it), and report what went wrong with it after the load's own notes.
  const double cache_wait = model->wait_for_weight_caches();
  if (cache_wait > 0.05) std::fprintf(g.info, "finished writing the weight cache (%.2f s more)\n", cache_wait);
  print_load_notes(*model, g.notes_at_load);

  if (g.json_out) {
    nlohmann::json j = generate_json(req, *result, *model, models_own_scheduler, g.load_seconds, runs, outputs);
    if (ranks.many()) j["ranks"] = rank_json;  // per rank: host, devices, load and busy seconds
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace

int run_generate(const std::vector<std::string>& argv) {
  const Args args = generate_args(argv);
  if (args.flag("help")) {
    std::printf("%s%s%s%s", kGenerateUsage, kControlNetUsage, kSheetUsage, kSweepUsage);
    return 0;
  }
  if (!args.positional().empty()) fail("unexpected argument '", args.positional()[0], "' (prompts go after --prompt)");
  const std::optional<SheetSpec> sheet = sheet_from_args(args);  // --x/--y/--z: sheet_command.h
  GridRun g;
  g.json_out = args.flag("json");
  g.quiet = args.flag("quiet");
  Ranks ranks;  // under mpirun: one of K processes (ranks.h); rank 0 alone prints and writes
  ranks.timeout_seconds = args.get_double("mpi-timeout", 120);
  if (!(ranks.timeout_seconds > 0)) fail("--mpi-timeout must be a positive number of seconds");
  g.info = g.json_out ? stderr : stdout;
  if (!ranks.leader()) g.info = std::fopen("/dev/null", "w");
  const bool sweep = sweep_requested(args);

  GenerationRequest req = request_from_args(args, ranks, sweep);
  g.repeat = args.get_int("repeat", 1, 1, 1000);
  g.scale = args.get_int("scale", 1, 1, 16);
  const ModelLoadOptions load = load_options_from_args(args, req);
  const std::filesystem::path model_path = args.get_or("model", StableDiffusionModel::default_model_path().string());
  auto model = load_model_on_ranks(ranks, model_path, load, &g.load_seconds);
  // Some rank could not load it: rank 0 says which and exits with 1; the others end quietly with
  // 0 (mpirun would end the job on a non-zero exit before rank 0 has printed its error).
  if (!model) return 0;
  g.notes_at_load = print_load_notes(*model, 0);
  few_step_defaults(args, req, *model, g.info, g.quiet);
  if (sheet && ranks.many()) fail("comparison sheets run in one process (not under mpirun)");
  vae_tiling_options(args, req, model->vae_scale_factor());
  if (sheet) return run_sheet(args, *sheet, req, model, g.info);
  if (sweep) {
    const SweepPlan plan = sweep_plan_from_args(args, req.prompts, req.seed, req.threads ? req.threads : hardware_threads());
    return run_sweep(ranks, args, plan, req, model, g.info, g.load_seconds);
  }
  if (ranks.many() && g.repeat > 1) fail("--repeat times one process; under mpirun give it without");
  return run_grid(args, ranks, req, model, g);
}

}  // namespace octodiff::cli
