#include "pipeline/metadata.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_numbers.h"
#include "pipeline/a1111_fields.h"
#include "pipeline/inpaint.h"
#include "pipeline/model.h"
#include "pipeline/model_hash.h"

namespace octodiff {

using nlohmann::json;

std::string sampler_display_name(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::Pndm: return "PNDM";
    case SchedulerKind::Ddim: return "DDIM";
    case SchedulerKind::Lms: return "LMS";
    case SchedulerKind::DpmSolverPP: return "DPM++ 2M";
    case SchedulerKind::Euler: return "Euler";
    case SchedulerKind::EulerAncestral: return "Euler a";
    case SchedulerKind::Lcm: return "LCM";
    case SchedulerKind::DpmSolverSde: return "DPM++ 2M SDE";
  }
  return "?";
}

ImageMetadata describe_image(const GenerationRequest& request, const GenerationResult& result,
                             const StableDiffusionModel& model, int d, int b) {
  const Signature& s = result.signature;
  ImageMetadata m;
  m.seed = request.seed;
  m.steps = s.steps;
  m.guidance_scale = request.guidance_scale;
  m.scheduler = s.scheduler;
  m.scheduler_is_models_own = s.scheduler == model.default_scheduler();
  m.timestep_spacing = s.timestep_spacing;
  if (supports_karras_sigmas(s.scheduler)) m.karras_sigmas = s.karras_sigmas;
  if (s.zero_snr || model.scheduler_config(s.scheduler).rescale_betas_zero_snr) m.zero_snr = s.zero_snr;
  m.guidance_rescale = request.guidance_rescale;
  m.decoder = s.decoder;
  if (s.strength > 0) m.denoising_strength = s.strength;
  if (s.inpaint) {
    m.inpaint = ImageMetadata::Inpaint{request.mask_blur, request.inpaint_only_masked, request.only_masked_padding,
                                       s.strength < 1 ? "original" : "latent noise",
                                       inpaint_mode_name(inpaint_mode_for(model.unet().config().in_channels,
                                                                          model.vae().config().latent_channels))};
  }
  if (const auto& t = result.vae_tiles) {
    const int scale = model.vae_scale_factor();
    m.vae_tiles = ImageMetadata::VaeTiles{t->tile * scale, t->overlap * scale, scale};
  }
  m.width = s.width;
  m.height = s.height;
  m.devices = s.devices;
  m.batch_per_device = s.batch;
  m.compat = s.compat;
  m.rng = request.rng;
  m.dtype = s.dtype;
  m.model_name = model.display_name();
  m.model_hash = model.model_hash();
  for (const AppliedLora& l : model.loras())
    m.loras.push_back({l.name, l.spec.strength, cached_file_sha256(l.spec.path).substr(0, 12)});
  m.prompt_syntax = request.prompt_syntax;
  m.long_prompts = request.long_prompts;
  m.comma_backtrack = request.comma_backtrack;
  m.clip_skip = request.clip_skip;
  for (const auto& e : result.embeddings) m.embeddings.push_back({e.name, cached_file_sha256(e.path).substr(0, 12)});
  for (const ControlNetUse& c : request.controlnets)
    m.controlnets.push_back({c.name, c.preprocessor, c.scale, c.guidance_start, c.guidance_end, c.threshold_a,
                             c.threshold_b});
  m.injected_latents = request.latents.has_value();
  m.sdxl_size = request.sdxl_size;
  m.version = OCTODIFF_VERSION;
  if (d < 0) {
    m.prompts = result.prompts;
    m.negative_prompts = result.negative_prompts;
    m.nsfw_flagged = result.nsfw_flagged;
  } else {
    const int i = d * s.batch + b;
    if (!result.nsfw_flagged.empty()) m.nsfw_flagged = {result.nsfw_flagged.at(i)};
    m.prompts = {result.prompts.at(i)};
    m.negative_prompts = {result.negative_prompts.at(i)};
    m.device = d;
    m.batch_index = b;
    m.device_key = result.device_keys.at(d);
  }
  return m;
}

namespace {

// A number as the settings line writes it ("%g": 0.7, 7.5, 1).
std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::string strength_text(float s) {
  return number_text(static_cast<double>(s));
}

// sd-webui-controlnet's value of a "ControlNet N" key (floats as Python prints them: 1.0, 0.8).
std::string controlnet_text(const ImageMetadata::ControlNet& c) {
  auto py = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    std::string t = text;
    return t.find_first_of(".e") == std::string::npos ? t + ".0" : t;
  };
  std::string text = cat("Module: ", c.module, ", Model: ", c.name, ", Weight: ", py(c.weight));
  if (c.module == "canny") text += cat(", Threshold A: ", py(c.threshold_a), ", Threshold B: ", py(c.threshold_b));
  return text + cat(", Guidance Start: ", py(c.guidance_start), ", Guidance End: ", py(c.guidance_end));
}

// "flagged" / "passed" for one image; "flagged images 2 5 of 8" / "passed" for a grid (no commas:
// they separate the A1111 keys).
std::string safety_text(const std::vector<bool>& flags) {
  std::string flagged;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) flagged += cat(flagged.empty() ? "" : " ", i + 1);
  if (flagged.empty()) return "passed";
  return flags.size() == 1 ? "flagged" : cat("flagged images ", flagged, " of ", flags.size());
}

// SDXL's size conditioning as "Original size: WxH, Crop top: N, Crop left: N, Target size: WxH"
// (the fields set; sizes width first, as A1111's "Size").
std::string sdxl_size_text(const SdxlSizeConditioning& z) {
  std::string out;
  if (z.original_height || z.original_width) out += cat(", Original size: ", z.original_width, "x", z.original_height);
  if (z.crop_top || z.crop_left) out += cat(", Crop top: ", z.crop_top, ", Crop left: ", z.crop_left);
  if (z.target_height || z.target_width) out += cat(", Target size: ", z.target_width, "x", z.target_height);
  return out;
}

// One of sdxl_size_text's keys into `z`.
void parse_sdxl_size_key(const std::string& key, const std::string& value, SdxlSizeConditioning& z) {
  if (key == "Crop top" || key == "Crop left") {
    (key == "Crop top" ? z.crop_top : z.crop_left) = std::stoi(value);
    return;
  }
  const size_t x = value.find('x');
  if (x == std::string::npos) return;
  const bool original = key == "Original size";
  (original ? z.original_width : z.target_width) = std::stoi(value.substr(0, x));
  (original ? z.original_height : z.target_height) = std::stoi(value.substr(x + 1));
}

}  // namespace

std::string a1111_parameters(const ImageMetadata& m) {
  std::string out = m.prompts.empty() ? "" : m.prompts[0];
  for (const auto& l : m.loras) out += cat(out.empty() ? "" : " ", "<lora:", l.name, ":", strength_text(l.strength), ">");
  const std::string neg = m.negative_prompts.empty() ? "" : m.negative_prompts[0];
  if (!neg.empty()) out += "\nNegative prompt: " + neg;
  char cfg[32];
  std::snprintf(cfg, sizeof cfg, "%g", m.guidance_scale);
  out += cat("\nSteps: ", m.steps, ", Sampler: ", sampler_display_name(m.scheduler),
             m.karras_sigmas.value_or(false) ? " Karras" : "", ", CFG scale: ", cfg, ", Seed: ", m.seed,
             ", Size: ", m.width, "x", m.height, ", Model hash: ", m.model_hash, ", Model: ", m.model_name,
             ", RNG: JAX ", jax::rng_scheme_name(m.rng), ", Compat: ", compat_name(m.compat));
  out += sdxl_size_text(m.sdxl_size);
  if (m.scheduler_is_models_own) out += ", Sampler source: model";
  if (m.timestep_spacing) out += ", Timestep spacing: " + timestep_spacing_name(*m.timestep_spacing);
  if (m.zero_snr) out += cat(", Noise Schedule: ", *m.zero_snr ? "Zero Terminal SNR" : "Default");
  if (m.guidance_rescale > 0) out += cat(", CFG Rescale phi: ", number_text(m.guidance_rescale));
  if (m.decoder == Decoder::Tiny) out += ", VAE: TAESD";
  if (const auto& t = m.vae_tiles) out += cat(", VAE tile: ", t->tile_px, ", VAE tile overlap: ", t->overlap_px);
  if (m.denoising_strength) {
    char strength[32];
    std::snprintf(strength, sizeof strength, "%g", *m.denoising_strength);
    out += cat(", Denoising strength: ", strength);
  }
  if (const auto& ip = m.inpaint) {
    out += cat(", Mask blur: ", ip->mask_blur, ", Inpaint area: ", ip->only_masked ? "Only masked" : "Whole picture");
    if (ip->only_masked) out += cat(", Masked area padding: ", ip->padding);
    out += cat(", Masked content: ", ip->masked_content, ", Inpaint mode: ", ip->mode);
  }
  if (!m.loras.empty()) {
    std::string hashes;
    for (const auto& l : m.loras) hashes += cat(hashes.empty() ? "" : ", ", l.name, ": ", l.hash);
    out += ", Lora hashes: \"" + hashes + "\"";
  }
  if (m.prompt_syntax != PromptSyntax::Plain) out += ", Prompt syntax: " + prompt_syntax_name(m.prompt_syntax);
  if (m.long_prompts != LongPrompts::Truncate) out += ", Long prompts: " + long_prompts_name(m.long_prompts);
  if (m.comma_backtrack != 0) out += cat(", Comma backtrack: ", m.comma_backtrack);
  if (m.clip_skip != 1) out += cat(", Clip skip: ", m.clip_skip);
  if (!m.embeddings.empty()) {
    std::string hashes;
    for (const auto& e : m.embeddings) hashes += cat(hashes.empty() ? "" : ", ", e.name, ": ", e.hash);
    out += ", TI hashes: \"" + hashes + "\"";
  }
  for (size_t k = 0; k < m.controlnets.size(); ++k)
    out += cat(", ControlNet ", k, ": \"", controlnet_text(m.controlnets[k]), "\"");
  if (!m.nsfw_flagged.empty()) out += ", Safety checker: " + safety_text(m.nsfw_flagged);
  if (m.device >= 0) out += cat(", Device: ", m.device + 1, "/", m.devices);
  if (m.devices * m.batch_per_device > 1 && m.device < 0) out += cat(", Grid: ", m.devices * m.batch_per_device, " images");
  if (!m.version.empty()) out += ", Version: Octodiff " + m.version;
  return out;
}

std::string metadata_json(const ImageMetadata& m) {
  json j;
  j["generator"] = "octodiff";
  j["version"] = m.version;
  j["prompts"] = m.prompts;
  j["negative_prompts"] = m.negative_prompts;
  j["seed"] = m.seed;
  j["steps"] = m.steps;
  j["guidance_scale"] = m.guidance_scale;
  j["scheduler"] = scheduler_name(m.scheduler);
  j["scheduler_is_models_own"] = m.scheduler_is_models_own;
  if (m.timestep_spacing) j["timestep_spacing"] = timestep_spacing_name(*m.timestep_spacing);
  if (m.karras_sigmas) j["karras_sigmas"] = *m.karras_sigmas;
  if (m.zero_snr) j["zero_snr"] = *m.zero_snr;
  if (m.guidance_rescale > 0) j["guidance_rescale"] = m.guidance_rescale;
  j["decoder"] = decoder_name(m.decoder);
  if (m.denoising_strength) j["denoising_strength"] = *m.denoising_strength;
  if (const auto& ip = m.inpaint)
    j["inpaint"] = {{"mask_blur", ip->mask_blur}, {"area", ip->only_masked ? "masked" : "whole"},
                    {"padding", ip->padding}, {"masked_content", ip->masked_content}, {"mode", ip->mode}};
  if (const auto& t = m.vae_tiles)
    j["vae_tiling"] = {{"tile_px", t->tile_px}, {"overlap_px", t->overlap_px}, {"scale", t->scale}};
  j["width"] = m.width;
  j["height"] = m.height;
  j["devices"] = m.devices;
  j["batch_per_device"] = m.batch_per_device;
  if (m.device >= 0) {
    j["device"] = m.device;
    j["batch_index"] = m.batch_index;
  }
  if (m.device_key) j["device_key"] = {m.device_key->k0, m.device_key->k1};
  j["compat"] = compat_name(m.compat);
  j["rng"] = jax::rng_scheme_name(m.rng);
  j["dtype"] = dtype_display_name(m.dtype);
  j["model"] = {{"name", m.model_name}, {"hash", m.model_hash}};
  j["latents"] = m.injected_latents ? "injected" : "seeded";
  if (const SdxlSizeConditioning& z = m.sdxl_size; z.given())
    j["sdxl_size"] = {{"original_size", {z.original_height, z.original_width}},
                      {"crops_coords_top_left", {z.crop_top, z.crop_left}},
                      {"target_size", {z.target_height, z.target_width}}};
  if (!m.nsfw_flagged.empty()) j["nsfw_flagged"] = m.nsfw_flagged;
  j["prompt_syntax"] = prompt_syntax_name(m.prompt_syntax);
  j["long_prompts"] = long_prompts_name(m.long_prompts);
  if (m.comma_backtrack != 0) j["comma_backtrack"] = m.comma_backtrack;
  if (m.clip_skip != 1) j["clip_skip"] = m.clip_skip;
  if (!m.embeddings.empty()) {
    j["embeddings"] = json::array();
    for (const auto& e : m.embeddings) j["embeddings"].push_back({{"name", e.name}, {"hash", e.hash}});
  }
  if (!m.loras.empty()) {
    j["loras"] = json::array();
    for (const auto& l : m.loras) j["loras"].push_back({{"name", l.name}, {"strength", l.strength}, {"hash", l.hash}});
  }
  for (const auto& c : m.controlnets) {
    json unit = {{"name", c.name}, {"module", c.module}, {"weight", c.weight},
                 {"guidance_start", c.guidance_start}, {"guidance_end", c.guidance_end}};
    if (c.module == "canny") {
      unit["threshold_a"] = c.threshold_a;
      unit["threshold_b"] = c.threshold_b;
    }
    j["controlnets"].push_back(unit);
  }
  return j.dump();
}

std::vector<PngText> png_texts(const ImageMetadata& m) {
  return {{"parameters", a1111_parameters(m)}, {"octodiff", metadata_json(m)}};
}

namespace {

std::optional<ImageMetadata> from_json(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto generator = j.find("generator");  // a non-string "generator" is someone else's JSON too
  if (generator == j.end() || !generator->is_string() || *generator != "octodiff") return std::nullopt;
  try {
    ImageMetadata m;
    m.version = j.value("version", "");
    m.prompts = j.at("prompts").get<std::vector<std::string>>();
    m.negative_prompts = j.value("negative_prompts", std::vector<std::string>(m.prompts.size(), ""));
    m.seed = checked_get<int64_t>(j.at("seed"));
    m.steps = checked_get<int>(j.at("steps"));
    m.guidance_scale = j.at("guidance_scale").get<double>();
    m.scheduler = parse_scheduler_kind(j.at("scheduler").get<std::string>());
    m.scheduler_is_models_own = j.value("scheduler_is_models_own", false);
    if (j.contains("timestep_spacing"))
      m.timestep_spacing = parse_timestep_spacing(j.at("timestep_spacing").get<std::string>());
    if (j.contains("karras_sigmas") && supports_karras_sigmas(m.scheduler))
      m.karras_sigmas = j.at("karras_sigmas").get<bool>();
    if (j.contains("zero_snr") && supports_zero_snr(m.scheduler)) m.zero_snr = j.at("zero_snr").get<bool>();
    m.guidance_rescale = j.value("guidance_rescale", 0.0);
    m.decoder = parse_decoder_name(j.value("decoder", "vae"));
    if (j.contains("denoising_strength")) m.denoising_strength = j.at("denoising_strength").get<double>();
    if (j.contains("inpaint")) {
      const json& ip = j.at("inpaint");
      m.inpaint = ImageMetadata::Inpaint{checked_value(ip, "mask_blur", 0), ip.value("area", "whole") == "masked",
                                         checked_value(ip, "padding", 32), ip.value("masked_content", "original"),
                                         ip.value("mode", "")};
    }
    if (j.contains("vae_tiling")) {
      const json& t = j.at("vae_tiling");
      m.vae_tiles = ImageMetadata::VaeTiles{checked_get<int>(t.at("tile_px")), checked_get<int>(t.at("overlap_px")),
                                            checked_value(t, "scale", 8)};
    }
    m.width = checked_get<int>(j.at("width"));
    m.height = checked_get<int>(j.at("height"));
    m.devices = checked_value(j, "devices", 1);
    m.batch_per_device = checked_value(j, "batch_per_device", 1);
    m.device = checked_value(j, "device", -1);
    m.batch_index = checked_value(j, "batch_index", -1);
    if (j.contains("device_key")) m.device_key = jax::Key{checked_get<uint32_t>(j["device_key"][0]), checked_get<uint32_t>(j["device_key"][1])};
    m.compat = parse_compat(j.value("compat", "flax"));
    m.rng = jax::parse_rng_scheme(j.value("rng", "classic"));
    m.dtype = parse_dtype_name(j.value("dtype", "f32"));
    if (j.contains("model")) {
      m.model_name = j["model"].value("name", "");
      m.model_hash = j["model"].value("hash", "");
    }
    m.injected_latents = j.value("latents", "seeded") == "injected";
    if (j.contains("sdxl_size")) {
      const json& z = j.at("sdxl_size");
      m.sdxl_size = {checked_get<int>(z.at("original_size")[0]), checked_get<int>(z.at("original_size")[1]),
                     checked_get<int>(z.at("crops_coords_top_left")[0]), checked_get<int>(z.at("crops_coords_top_left")[1]),
                     checked_get<int>(z.at("target_size")[0]), checked_get<int>(z.at("target_size")[1])};
    }
    if (j.contains("nsfw_flagged")) m.nsfw_flagged = j.at("nsfw_flagged").get<std::vector<bool>>();
    m.prompt_syntax = parse_prompt_syntax(j.value("prompt_syntax", "plain"));
    m.long_prompts = parse_long_prompts(j.value("long_prompts", "truncate"));
    m.comma_backtrack = checked_value(j, "comma_backtrack", 0);
    m.clip_skip = checked_value(j, "clip_skip", 1);
    if (j.contains("embeddings"))
      for (const auto& e : j.at("embeddings")) m.embeddings.push_back({e.at("name").get<std::string>(), e.value("hash", "")});
    if (j.contains("controlnets"))
      for (const auto& c : j.at("controlnets"))
        m.controlnets.push_back({c.value("name", ""), c.value("module", "none"), c.value("weight", 1.0),
                                 c.value("guidance_start", 0.0), c.value("guidance_end", 1.0),
                                 c.value("threshold_a", 100.0), c.value("threshold_b", 200.0)});
    if (j.contains("loras"))
      for (const auto& l : j.at("loras"))
        m.loras.push_back({l.at("name").get<std::string>(), checked_get<float>(l.at("strength")), l.value("hash", "")});
    return m;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged chunk: fall back to the A1111 text
  }
}

// One of A1111's inpainting keys into m.inpaint.
void parse_a1111_inpaint(const std::string& key, const std::string& value, ImageMetadata& m) {
  if (!m.inpaint) m.inpaint = ImageMetadata::Inpaint{};
  if (key == "Mask blur") m.inpaint->mask_blur = std::stoi(value);
  else if (key == "Inpaint area") m.inpaint->only_masked = value == "Only masked";
  else if (key == "Masked area padding") m.inpaint->padding = std::stoi(value);
  else if (key == "Masked content") m.inpaint->masked_content = value;
  else if (key == "Inpaint mode") m.inpaint->mode = value;
}

// The sd-webui-controlnet extension's value: "Module: canny, Model: NAME, Weight: 1.0, …" (quoted).
ImageMetadata::ControlNet parse_controlnet_text(std::string value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  ImageMetadata::ControlNet c;
  for (const auto& [k, v] : controlnet_fields(value)) {
    if (k == "Module") c.module = v;
    else if (k == "Model") c.name = v;
    else if (k == "Weight") c.weight = std::stod(v);
    else if (k == "Guidance Start") c.guidance_start = std::stod(v);
    else if (k == "Guidance End") c.guidance_end = std::stod(v);
    else if (k == "Threshold A") c.threshold_a = std::stod(v);
    else if (k == "Threshold B") c.threshold_b = std::stod(v);
  }
  return c;
}

// "Prompt\nNegative prompt: negative" (the lines before the settings line) into m's prompts.
void read_a1111_prompts(std::string head, ImageMetadata& m) {
  std::string negative;
  const std::string marker = "\nNegative prompt: ";
  size_t neg = head.find(marker);
  if (head.rfind("Negative prompt: ", 0) == 0) {
    negative = head.substr(17);
    head.clear();
  } else if (neg != std::string::npos) {
    negative = head.substr(neg + marker.size());
    head = head.substr(0, neg);
  }
  m.prompts = {head};
  m.negative_prompts = {negative};
}

// One sentence into m.not_applied, once, and at most 8 of them (hostile text may repeat keys).
void note_not_applied(ImageMetadata& m, std::string text) {
  if (m.not_applied.size() >= 8 ||
      std::find(m.not_applied.begin(), m.not_applied.end(), text) != m.not_applied.end())
    return;
  m.not_applied.push_back(std::move(text));
}

// A1111's sampler name: ours ("DPM++ 2M": Karras sigmas off, where the scheduler has them), ours
// with Karras sigmas ("DPM++ 2M Karras"), ours with a sigma schedule this port lacks ("Euler
// Exponential": Euler with its own timesteps, said in m.not_applied), or none (the model's own
// scheduler, said).
void read_a1111_sampler(const std::string& value, ImageMetadata& m) {
  for (SchedulerKind k : all_scheduler_kinds())
    if (value == sampler_display_name(k)) {
      m.scheduler = k;
      if (supports_karras_sigmas(k)) m.karras_sigmas = false;
      return;
    }
  for (const char* schedule : {" Karras", " Exponential", " SGM Uniform", " Polyexponential"}) {
    const std::string suffix = schedule;
    if (value.size() <= suffix.size() ||
        value.compare(value.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string base = value.substr(0, value.size() - suffix.size());
    for (SchedulerKind k : all_scheduler_kinds())
      if (base == sampler_display_name(k)) {
        m.scheduler = k;
        if (suffix == " Karras" && supports_karras_sigmas(k)) {
          m.karras_sigmas = true;
          return;
        }
        note_not_applied(m, cat("the sampler '", value, "' runs as '", base, "': the", schedule,
                                " schedule is not available here"));
        return;
      }
  }
  m.scheduler_unavailable = true;
  note_not_applied(m, cat("the sampler '", value, "' is not available here: the model's own scheduler runs"));
}

// One "Key: value" of the settings line into m; keys it does not know are skipped. Throws
// std::exception for a value it cannot read.
void apply_a1111_setting(const std::string& key, const std::string& value, ImageMetadata& m) {
  if (key == "Steps") m.steps = std::stoi(value);
  else if (key == "CFG scale") m.guidance_scale = std::stod(value);
  else if (key == "Seed") m.seed = std::stoll(value);
  else if (key == "Model hash") m.model_hash = value;
  else if (key == "Model") m.model_name = value;
  else if (key == "Size") {
    size_t x = value.find('x');
    if (x != std::string::npos) {
      m.width = std::stoi(value.substr(0, x));
      m.height = std::stoi(value.substr(x + 1));
    }
  } else if (key == "Sampler") {
    read_a1111_sampler(value, m);
  } else if (key == "Schedule type") {  // A1111 1.9+: the sigma schedule beside the sampler
    const bool has_karras = supports_karras_sigmas(m.scheduler);
    if (has_karras && (value == "Karras" || value == "Uniform"))
      m.karras_sigmas = value == "Karras";
    else if (value != "Automatic" && value != "Uniform")
      note_not_applied(
          m, cat("the schedule type '", value, "' is not available here: the scheduler's own timesteps run"));
  } else if (key == "Noise Schedule") {  // A1111's sd_noise_schedule (after the sampler in its text)
    if (value != "Zero Terminal SNR" && value != "Default")
      note_not_applied(m,
                       cat("the noise schedule '", value, "' is not available here: the model's own runs"));
    else if (supports_zero_snr(m.scheduler))
      m.zero_snr = value == "Zero Terminal SNR";
    else if (value != "Default")
      note_not_applied(m, cat("zero terminal SNR is not applied: the sampler '",
                              sampler_display_name(m.scheduler), "' has none here"));
  } else if (key == "CFG Rescale phi") {
    m.guidance_rescale = std::stod(value);
  } else if (key == "Hires upscale" || key == "Hires resize") {
    note_not_applied(m, cat("the hires fix (", key, ": ", value,
                            ") is not applied: the image is made at its first pass's size"));
  } else if (key == "Sampler source") {
    m.scheduler_is_models_own = value == "model";
  } else if (key == "Timestep spacing") {
    m.timestep_spacing = parse_timestep_spacing(value);
  } else if (key == "Denoising strength") {
    m.denoising_strength = std::stod(value);
  } else if (key == "Mask blur" || key == "Inpaint area" || key == "Masked area padding" ||
             key == "Masked content" || key == "Inpaint mode") {
    parse_a1111_inpaint(key, value, m);
  } else if (key == "VAE tile" || key == "VAE tile overlap") {
    if (!m.vae_tiles) m.vae_tiles = ImageMetadata::VaeTiles{};
    (key == "VAE tile" ? m.vae_tiles->tile_px : m.vae_tiles->overlap_px) = std::stoi(value);
  } else if (key == "VAE") {
    if (value == "TAESD") m.decoder = Decoder::Tiny;
  } else if (key == "RNG") {
    m.rng = value.find("partitionable") != std::string::npos ? jax::RngScheme::Partitionable
                                                              : jax::RngScheme::Classic;
  } else if (key == "Compat") {
    m.compat = parse_compat(value);
  } else if (key == "Original size" || key == "Crop top" || key == "Crop left" || key == "Target size") {
    parse_sdxl_size_key(key, value, m.sdxl_size);
  } else if (key == "Prompt syntax") {
    m.prompt_syntax = parse_prompt_syntax(value);
  } else if (key == "Long prompts") {
    m.long_prompts = parse_long_prompts(value);
  } else if (key == "Comma backtrack") {
    m.comma_backtrack = std::stoi(value);
  } else if (key == "Clip skip") {
    m.clip_skip = std::stoi(value);
  } else if (key.rfind("ControlNet ", 0) == 0) {
    m.controlnets.push_back(parse_controlnet_text(value));
  }
}

std::optional<ImageMetadata> from_a1111(const std::string& text) {
  // The last line holds "Key: value, Key: value"; lines before it are the prompt, then
  // optionally "Negative prompt: ...".
  const size_t last_nl = text.rfind('\n');
  if (last_nl == std::string::npos) return std::nullopt;
  const std::string params = text.substr(last_nl + 1);
  if (params.find("Steps: ") == std::string::npos) return std::nullopt;
  ImageMetadata m;
  read_a1111_prompts(text.substr(0, last_nl), m);
  // Octodiff writes "Compat: "; without it A1111 (or another tool reading as A1111) made the image.
  const bool by_octodiff = params.find("Compat: ") != std::string::npos;
  m.prompt_syntax = by_octodiff ? PromptSyntax::Plain : PromptSyntax::A1111;  // A1111 always reads its syntax
  m.long_prompts = by_octodiff ? LongPrompts::Truncate : LongPrompts::Chunk;
  m.comma_backtrack = by_octodiff ? 0 : 20;
  if (!by_octodiff)
    note_not_applied(m,
                     "the seed draws JAX's noise here, not the torch noise the image was made from: "
                     "expect another image with the same settings");
  // A value in double quotes (Lora hashes, ControlNet N) holds commas and "Key: value" pairs of its own.
  for (const auto& [key, value] : a1111_settings_fields(params)) {
    try {
      apply_a1111_setting(key, value, m);
    } catch (const std::exception&) {
      // Tolerate fields other tools write differently.
    }
  }
  if (m.steps <= 0) return std::nullopt;
  return m;
}

}  // namespace

std::optional<ImageMetadata> parse_png_metadata(const std::vector<PngText>& texts) {
  for (const auto& t : texts)
    if (t.key == "octodiff")
      if (auto m = from_json(t.text)) return m;
  for (const auto& t : texts)
    if (t.key == "parameters")
      if (auto m = from_a1111(t.text)) return m;
  return std::nullopt;
}

GenerationRequest request_from_metadata(const ImageMetadata& m) {
  GenerationRequest r;
  r.prompts = m.prompts;
  r.negative_prompts = m.negative_prompts;
  r.seed = m.seed;
  r.steps = m.steps;
  r.guidance_scale = m.guidance_scale;
  // Explicit: the same scheduler even if the model's default changes (unless the image's has no
  // counterpart here).
  if (!m.scheduler_unavailable) r.scheduler = m.scheduler;
  r.timestep_spacing = m.timestep_spacing;
  r.karras_sigmas = m.karras_sigmas;
  r.zero_snr = m.zero_snr;
  r.guidance_rescale = m.guidance_rescale;
  r.width = m.width;
  r.height = m.height;
  r.sdxl_size = m.sdxl_size;
  r.compat = m.compat;
  r.rng = m.rng;
  r.dtype = m.dtype;
  r.prompt_syntax = m.prompt_syntax;
  r.long_prompts = m.long_prompts;
  r.comma_backtrack = m.comma_backtrack;
  r.clip_skip = m.clip_skip;
  r.sdxl_size = m.sdxl_size;
  if (m.denoising_strength) r.strength = *m.denoising_strength;
  if (const auto& ip = m.inpaint) {
    r.mask_blur = ip->mask_blur;
    r.inpaint_only_masked = ip->only_masked;
    r.only_masked_padding = ip->padding;
  }
  if (const auto& t = m.vae_tiles; t && t->scale > 0)  // tiled again as then; absent: auto
    r.vae_tiling = VaeTiling{VaeTilingMode::On, t->tile_px / t->scale, t->overlap_px / t->scale};
  if (m.is_grid()) {
    r.devices = m.devices;
    r.batch_per_device = m.batch_per_device;
  }
  return r;
}

}  // namespace octodiff
