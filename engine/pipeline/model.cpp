#include "pipeline/model.h"

#include <algorithm>
#include <chrono>
#include <malloc.h>
#include <cstdlib>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory.h"
#include "core/sha256.h"
#include "io/files.h"
#include "io/weight_cache.h"
#include "io/weight_source.h"
#include "kernels/isa.h"
#include "models/layers.h"
#include "pipeline/autoencoder_tiny_loader.h"
#include "pipeline/component_weights.h"
#include "pipeline/model_hash.h"
#include "pipeline/single_file_model.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

std::string read_config(const fs::path& dir, const std::string& name) {
  const fs::path p = dir / name;
  if (!fs::exists(p)) fail("model folder is incomplete: '", p.string(), "' is missing");
  return read_text_file(p);
}

fs::path require_dir(const fs::path& root, const std::string& name) {
  fs::path d = root / name;
  if (!fs::is_directory(d))
    fail("'", root.string(), "' has no '", name, "' folder; a diffusers model folder needs tokenizer/, "
         "text_encoder/, unet/, vae/ (and scheduler/)");
  return d;
}

// Loading frees hundreds of MB of float32 temporaries (tensors as read, before packing) in
// sizes glibc keeps on its heap; hand them back so that a loaded model costs only its weights.
void release_freed_heap() { malloc_trim(0); }

const char* component_name(ModelComponent c) {
  switch (c) {
    case ModelComponent::TextEncoder: return "text_encoder";
    case ModelComponent::UNet: return "unet";
    case ModelComponent::Vae: return "vae";
    case ModelComponent::TextEncoder2: return "text_encoder_2";
  }
  return "?";
}

// The cache file for one component: named by everything that decides its packed bytes — the
// weight files (path, size, modification time), the component, the precision and load options.
// The packing layout itself is checked blob by blob through the tags (kernels::packed_tag).
fs::path weight_cache_path(const ModelLoadOptions& o, ModelComponent c, const std::vector<fs::path>& files) {
  // No format version here: a file of another format is refused on opening and rebuilt in place.
  std::string key = cat("octodiff-weight-cache|", component_name(c), "|", dtype_display_name(o.dtype), "|vae_encoder=",
                        o.load_vae_encoder, "|ema=", o.use_ema);
  for (const auto& f : files) {
    std::error_code ec;
    key += cat("|", fs::absolute(f, ec).string(), "|", fs::file_size(f, ec), "|",
               fs::last_write_time(f, ec).time_since_epoch().count());
  }
  const fs::path dir = o.weight_cache_dir ? *o.weight_cache_dir : octodiff_cache_dir() / "weights";
  return dir / cat(component_name(c), "-", sha256_hex(key.data(), key.size()).substr(0, 24), ".octw");
}

kernels::Precision precision_of(const ModelLoadOptions& o) {
  return o.dtype == ComputeDType::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
}

// The VAE's load options: in a bf16 run it is packed and run in float32 (the weight cache keys it
// as f32 then, the same cache as a float32 load's)
// - when it is an SDXL VAE whose config says force_upcast (SDXL base's does; the fp16-fix VAE
//   does not), as diffusers' SDXL pipelines decode it in float32;
// - on CPUs whose bf16 products are FMAs on widened values (kernels::kernel_bf16_dot() false:
//   Intel Sapphire/Emerald Rapids, AVX-512 without BF16, AVX2), as the tiny autoencoder
//   (autoencoder_tiny_loader.h): float32 convolutions need fewer of them there (Winograd F(4×4, 3×3)
//   is float32's), SD 1.5's 512×512 decode was ×1.29–1.40 faster in float32 on Emerald Rapids and
//   ×1.09–1.56 with its AVX2 kernels (bench/results, session 17), and it is exact. A note says so.
ModelLoadOptions vae_load_options(const ModelLoadOptions& o, const VaeConfig& cfg, bool sdxl,
                                  std::vector<std::string>* notes) {
  ModelLoadOptions v = o;
  if (o.dtype != ComputeDType::BF16) return v;
  if (sdxl && cfg.force_upcast) {
    v.dtype = ComputeDType::F32;
  } else if (!kernels::kernel_bf16_dot()) {
    v.dtype = ComputeDType::F32;
    notes->push_back(
        "the VAE computes in f32: this CPU's bf16 products are float32 FMAs, and float32 convolutions need fewer "
        "of them (model.cpp, vae_load_options)");
  }
  return v;
}

bool weight_cache_enabled(const ModelLoadOptions& o) {
  if (!o.weight_cache) return false;
  const char* env = std::getenv("OCTODIFF_WEIGHT_CACHE");
  return !(env && (std::string(env) == "off" || std::string(env) == "0"));
}

}  // namespace

// Loads one component through its weight cache: maps a valid cache, else packs into a new one.
// A cache that does not fit what the loader asks for is discarded and rebuilt; a cache that
// cannot be written only costs the memory savings (noted in load_notes()).
template <typename Load>
auto StableDiffusionModel::load_component(const ModelLoadOptions& o, ModelComponent c,
                                          const std::vector<fs::path>& files, const WeightSource& source, Load load) {
  struct ReleaseScratch {
    ~ReleaseScratch() { release_packing_scratch(); }
  } release_scratch;
  // Packing reads every tensor: the checkpoint is read ahead meanwhile. A load served from the
  // cache reads only a few small tensors and must not pull the whole file in.
  if (!weight_cache_enabled(o)) {
    source.read_ahead();
    return load();
  }
  const int slot = static_cast<int>(c);
  const fs::path path = weight_cache_path(o, c, files);
  std::string why;
  if (auto cache = WeightCacheFile::open(path, &why)) {
    try {
      WeightCacheScope scope(cache);
      auto result = load();
      if (!cache->all_read()) throw WeightCacheMismatch("weight cache has more weights than the model");
      caches_[slot] = cache;
      from_cache_[slot] = true;
      cache->release();
      return result;
    } catch (const WeightCacheMismatch& e) {
      load_notes_.push_back(cat("rebuilt the ", component_name(c), " weight cache (", e.what(), ")"));
      std::error_code ec;
      fs::remove(path, ec);
    }
  }
  source.read_ahead();
  prune_weight_cache_dir(path.parent_path());
  auto cache = WeightCacheFile::create(path, o.weight_cache_capacity_limit);
  std::optional<decltype(load())> result;
  {
    WeightCacheScope scope(cache);
    result.emplace(load());
  }
  cache->commit_in_background();  // the model is ready now; the disk catches up (load_notes())
  caches_[slot] = cache;
  return std::move(*result);
}

int StableDiffusionModel::load_sdxl_second_text_encoder(const fs::path& root, const ModelLoadOptions& options) {
  const fs::path te2_dir = root / "text_encoder_2";
  if (!fs::is_directory(te2_dir)) return 0;
  const fs::path tok2_dir = require_dir(root, "tokenizer_2");
  tokenizer_2_ = std::make_shared<ClipTokenizer>(ClipTokenizer::from_folder(tok2_dir));
  const ComponentWeights te2 = open_component_weights(te2_dir, "model", "flax_model.msgpack", FlaxNaming::Transformers,
                                                      options.variant, options.prefer_flax);
  const ClipTextConfig cfg =
      ClipTextConfig::from_json(read_config(te2_dir, "config.json"), (te2_dir / "config.json").string());
  text_encoder_2_source_ = std::make_shared<const WeightSource>(*te2.source);  // for with_loras()
  text_encoder_2_ = std::make_shared<ClipTextModelWithProjection>(
      load_component(options, ModelComponent::TextEncoder2, te2.files, *te2.source, [&] {
        const PackedLayersScope record(recorder(ModelComponent::TextEncoder2));
        return ClipTextModelWithProjection::load(*te2.source, cfg);
      }));
  for (const auto& f : te2.files) weights_bytes_ += static_cast<int64_t>(fs::file_size(f));
  if (const fs::path index = root / "model_index.json"; fs::exists(index)) {
    const auto j = nlohmann::json::parse(read_text_file(index), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail("'", index.string(), "' is not valid JSON");
    if (auto it = j.find("force_zeros_for_empty_prompt"); it != j.end() && it->is_boolean())
      force_zeros_for_empty_prompt_ = it->get<bool>();
  }
  description_ = "SDXL " + description_;
  return cfg.hidden_size;
}

std::vector<std::string> StableDiffusionModel::load_notes() const {
  std::vector<std::string> notes = load_notes_;
  for (auto c : {ModelComponent::TextEncoder, ModelComponent::UNet, ModelComponent::Vae, ModelComponent::TextEncoder2}) {
    const auto& cache = caches_[static_cast<int>(c)];
    if (!cache || cache->reading()) continue;
    if (std::string w = cache->warning(); !w.empty()) notes.push_back(cat(component_name(c), ": ", w));
  }
  return notes;
}

// The caches were written at idle priority while the next component was being packed; the load
// is over, so what is left of them goes on at normal priority (without it, a generation started
// at once would starve them, and the blobs not yet written would stay in anonymous memory,
// which release() cannot drop between the pipeline's phases).
void StableDiffusionModel::finish_weight_caches_at_normal_priority() const {
  for (const auto& cache : caches_)
    if (cache && !cache->reading()) cache->finish_at_normal_priority();
}

double StableDiffusionModel::wait_for_weight_caches() const {
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& cache : caches_)
    if (cache && !cache->reading()) cache->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void StableDiffusionModel::release(ModelComponent c) const {
  if (resident_) return;
  if (const auto& cache = caches_[static_cast<int>(c)]) cache->release();
  if (c == ModelComponent::TextEncoder) release(ModelComponent::TextEncoder2);
}

uint64_t StableDiffusionModel::cached_weight_bytes() const {
  uint64_t bytes = 0;
  for (const auto& cache : caches_)
    if (cache) bytes += cache->file_bytes();
  return bytes;
}

uint64_t StableDiffusionModel::resident_weight_bytes(ModelComponent c) const {
  const auto& cache = caches_[static_cast<int>(c)];
  return cache ? cache->resident_bytes() : 0;
}

WeightResidency parse_weight_residency(const std::string& name) {
  if (name == "auto") return WeightResidency::Auto;
  if (name == "minimal") return WeightResidency::Minimal;
  if (name == "resident") return WeightResidency::Resident;
  fail("unknown weight residency '", name, "' (expected 'auto', 'minimal' or 'resident')");
}

std::string weight_residency_name(WeightResidency r) {
  switch (r) {
    case WeightResidency::Auto: return "auto";
    case WeightResidency::Minimal: return "minimal";
    case WeightResidency::Resident: return "resident";
  }
  return "auto";
}

void StableDiffusionModel::load_tiny_autoencoder(const ModelLoadOptions& options) {
  if (!options.tiny_autoencoder) return;
  const ComputeDType dtype = tiny_autoencoder_dtype(options.dtype, kernels::kernel_bf16_dot());
  auto tiny = load_autoencoder_tiny(*options.tiny_autoencoder, dtype);
  const int channels = tiny->config().latent_channels, expected = vae_->config().latent_channels;
  if (channels != expected)
    fail("tiny autoencoder '", options.tiny_autoencoder->string(), "' takes ", channels,
         "-channel latents; this model's VAE makes ", expected, " (a TAESD for another architecture?)");
  tiny_autoencoder_ = std::move(tiny);
  if (dtype != options.dtype)
    load_notes_.push_back(
        "the tiny autoencoder computes in f32: this CPU's bf16 products are float32 FMAs, and float32 "
        "convolutions need fewer of them (autoencoder_tiny_loader.h)");
}

WeightResidency auto_weight_residency(uint64_t weight_bytes, double ram_bytes) {
  return static_cast<double>(weight_bytes) <= kResidentWeightsFractionOfRam * ram_bytes
             ? WeightResidency::Resident
             : WeightResidency::Minimal;
}

void StableDiffusionModel::decide_residency(const ModelLoadOptions& options) {
  WeightResidency r = options.residency;
  if (const char* env = std::getenv("OCTODIFF_WEIGHT_RESIDENCY"); env && *env) r = parse_weight_residency(env);
  if (r == WeightResidency::Auto) r = auto_weight_residency(cached_weight_bytes(), physical_memory_bytes());
  resident_ = r == WeightResidency::Resident;
}

void StableDiffusionModel::prefetch(ModelComponent c) const {
  if (const auto& cache = caches_[static_cast<int>(c)]) cache->prefetch();
  if (c == ModelComponent::TextEncoder) prefetch(ModelComponent::TextEncoder2);
}

void StableDiffusionModel::warm_up() const {
  if (!resident_) return;
  for (ModelComponent c : {ModelComponent::TextEncoder, ModelComponent::UNet, ModelComponent::Vae})
    prefetch(c);
}

void StableDiffusionModel::wait_for_prefetch() const {
  for (const auto& cache : caches_)
    if (cache) cache->wait_for_prefetch();
}

void StableDiffusionModel::keep_sources(const WeightSource& unet, const WeightSource& text_encoder) {
  unet_source_ = std::make_shared<const WeightSource>(unet);
  text_encoder_source_ = std::make_shared<const WeightSource>(text_encoder);
}

PackedLayersScope StableDiffusionModel::recorder(ModelComponent c) {
  const int slot = static_cast<int>(c);
  packed_layers_[slot] = {};
  layer_stats_[slot] = {};  // a load retried without its stale cache counts afresh
  return PackedLayersScope(&packed_layers_[slot], nullptr, &layer_stats_[slot]);
}

PackedLayerStats StableDiffusionModel::packed_layer_stats(ModelComponent c) const {
  if (c == ModelComponent::Vae) return {};  // recorded for the LoRA'd networks only
  return layer_stats_[static_cast<int>(c)];
}

void StableDiffusionModel::share_base_parts(const StableDiffusionModel& base) {
  path_ = base.path_;
  single_file_ = base.single_file_;
  description_ = base.description_;
  dtype_ = base.dtype_;
  hash_file_ = base.hash_file_;
  weights_bytes_ = base.weights_bytes_;
  tokenizer_ = base.tokenizer_;
  tokenizer_2_ = base.tokenizer_2_;
  force_zeros_for_empty_prompt_ = base.force_zeros_for_empty_prompt_;
  vae_ = base.vae_;
  scheduler_json_ = base.scheduler_json_;
  scheduler_source_ = base.scheduler_source_;
  default_scheduler_ = base.default_scheduler_;
  tiny_autoencoder_ = base.tiny_autoencoder_;
  safety_checker_ = base.safety_checker_;
  for (int i = 0; i < 4; ++i) {
    caches_[i] = base.caches_[i];  // release()/prefetch() reach the shared layers
    from_cache_[i] = base.from_cache_[i];
  }
  load_notes_ = base.load_notes_;
  resident_ = base.resident_;
}

std::shared_ptr<const StableDiffusionModel> StableDiffusionModel::with_loras(
    const std::shared_ptr<const StableDiffusionModel>& model, const std::vector<LoraSpec>& loras) {
  const std::shared_ptr<const StableDiffusionModel> base = model->base_ ? model->base_ : model;
  if (loras.empty()) return base;
  if (!base->unet_source_ || !base->text_encoder_source_ || (base->is_sdxl() && !base->text_encoder_2_source_))
    fail("internal: the model keeps no weight sources");
  auto m = std::make_shared<StableDiffusionModel>();
  m->share_base_parts(*base);
  m->base_ = base;
  WeightSource unet_w = *base->unet_source_, te_w = *base->text_encoder_source_;
  std::optional<WeightSource> te2_w;
  if (base->is_sdxl()) te2_w.emplace(*base->text_encoder_2_source_);
  const ClipTextConfig* te2_config = base->is_sdxl() ? &base->text_encoder_2_->config() : nullptr;
  m->loras_ = patch_loras(loras, lora_targets(base->unet_->config(), base->text_encoder_->config(), te2_config), unet_w,
                          te_w, te2_w ? &*te2_w : nullptr);
  // Each network again, sharing every packed layer no LoRA touched with the base's.
  auto reusing = [&](ModelComponent c) {
    const int slot = static_cast<int>(c);
    return PackedLayersScope(nullptr, &base->packed_layers_[slot], &m->layer_stats_[slot]);
  };
  {
    const PackedLayersScope reuse = reusing(ModelComponent::UNet);
    m->unet_ = std::make_shared<UNet2DCondition>(UNet2DCondition::load(unet_w, base->unet_->config(), base->unet_->precision()));
  }
  {
    const PackedLayersScope reuse = reusing(ModelComponent::TextEncoder);
    m->text_encoder_ = std::make_shared<ClipTextModel>(ClipTextModel::load(te_w, base->text_encoder_->config()));
  }
  if (te2_w) {
    const PackedLayersScope reuse = reusing(ModelComponent::TextEncoder2);
    m->text_encoder_2_ = std::make_shared<ClipTextModelWithProjection>(ClipTextModelWithProjection::load(*te2_w, *te2_config));
  }
  release_packing_scratch();
  release_freed_heap();
  return m;
}

bool StableDiffusionModel::loaded_from_cache(ModelComponent c) const { return from_cache_[static_cast<int>(c)]; }

std::vector<fs::path> component_weight_files(const fs::path& dir, const std::string& base,
                                             const std::string& variant) {
  // diffusers names: <base>.safetensors, <base>.<variant>.safetensors, and sharded
  // <base>-00001-of-00002.safetensors (with an index json).
  auto collect = [&](const std::string& stem) {
    std::vector<fs::path> files;
    if (fs::exists(dir / (stem + ".safetensors"))) files.push_back(dir / (stem + ".safetensors"));
    if (files.empty()) {
      std::regex shard(std::regex_replace(stem, std::regex(R"([.])"), R"(\.)") +
                       R"(-\d{5}-of-\d{5}\.safetensors)");
      for (const auto& e : fs::directory_iterator(dir))
        if (std::regex_match(e.path().filename().string(), shard)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    }
    return files;
  };
  std::vector<fs::path> files;
  if (!variant.empty()) files = collect(base + "." + variant);
  if (files.empty()) files = collect(base);
  if (files.empty() && variant.empty()) {
    for (const char* v : {"fp16", "bf16"}) {
      files = collect(base + "." + v);
      if (!files.empty()) break;
    }
  }
  if (!files.empty()) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".msgpack")
      fail("'", dir.string(), "' only has '", e.path().filename().string(), "'; Flax weights are read from "
           "diffusion_flax_model.msgpack (UNet, VAE) or flax_model.msgpack (text encoder)");
  for (const char* other : {".bin", ".ckpt"}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == other)
        fail("'", dir.string(), "' only has '", e.path().filename().string(), "'. Octodiff loads .safetensors only "
             "(pickled .bin/.ckpt files can run code); convert it, e.g. load it in diffusers and "
             "save_pretrained(..., safe_serialization=True)");
    }
  }
  fail("no weights in '", dir.string(), "': expected ", base, ".safetensors");
}

fs::path StableDiffusionModel::default_model_path() {
  if (const char* env = std::getenv("OCTODIFF_DEFAULT_MODEL"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "octodiff" / "demo-model";
    if (fs::exists(installed / "model_index.json")) return installed;
  }
  return fs::path(OCTODIFF_RESOURCE_DIR) / "demo-model";
}

std::string StableDiffusionModel::display_name() const {
  fs::path p = path_;
  if (p.filename().empty()) p = p.parent_path();
  return single_file_ ? p.stem().string() : p.filename().string();
}

SchedulerConfig StableDiffusionModel::scheduler_config(SchedulerKind kind,
                                                       std::optional<TimestepSpacing> spacing,
                                                       std::optional<bool> karras_sigmas,
                                                       std::optional<bool> zero_snr) const {
  SchedulerConfig c = SchedulerConfig::defaults(kind);
  if (!scheduler_json_.empty()) {
    try {
      c = SchedulerConfig::from_json(scheduler_json_, kind);
    } catch (const Error& e) {
      fail(scheduler_source_, ": ", e.what());
    }
  }
  if (spacing) c.timestep_spacing = *spacing;
  if (karras_sigmas) {
    if (*karras_sigmas && !supports_karras_sigmas(kind))
      fail("Karras sigmas need the lms, euler, dpm++ or dpm++-sde scheduler, not ", scheduler_name(kind));
    c.use_karras_sigmas = *karras_sigmas;
  }
  if (zero_snr) {
    if (*zero_snr && !supports_zero_snr(kind))
      fail("zero terminal SNR needs the ddim, euler, euler-a, dpm++, dpm++-sde or lcm scheduler, not ",
           scheduler_name(kind), " (diffusers' ", scheduler_class_name(kind),
           " has no rescale_betas_zero_snr)");
    c.rescale_betas_zero_snr = *zero_snr;
  }
  try {
    c.validate(kind);  // with the overrides (Euler's sigma bounds are checked only with Karras sigmas)
  } catch (const Error& e) {
    if (scheduler_json_.empty()) throw;
    fail(scheduler_source_, ": ", e.what());
  }
  return c;
}

// The model's own scheduler configuration; the class defaults for one the pipeline would refuse.
static SchedulerConfig own_config_or_defaults(const StableDiffusionModel& m) {
  try {
    return m.scheduler_config(m.default_scheduler());
  } catch (const Error&) {
    return SchedulerConfig::defaults(m.default_scheduler());
  }
}

bool StableDiffusionModel::default_scheduler_has_karras_sigmas() const {
  return own_config_or_defaults(*this).use_karras_sigmas;
}

bool StableDiffusionModel::default_scheduler_has_zero_snr() const {
  return own_config_or_defaults(*this).rescale_betas_zero_snr;
}

void StableDiffusionModel::set_scheduler_config(std::string json_text, const std::string& where) {
  scheduler_json_ = std::move(json_text);
  scheduler_source_ = where;
  default_scheduler_ = SchedulerKind::Pndm;
  std::optional<std::string> cls;
  std::optional<SchedulerKind> kind;  // DPMSolverMultistepScheduler: by its algorithm_type
  try {
    cls = scheduler_config_class_name(scheduler_json_);
    kind = scheduler_config_kind(scheduler_json_);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  if (!cls) return;
  if (kind) {
    default_scheduler_ = *kind;
  } else {
    load_notes_.push_back(cat(where, " names the scheduler class '", *cls,
                              "', which Octodiff does not implement; the model's default scheduler is "
                              "PNDMScheduler instead (a request may name another scheduler)"));
  }
}

std::string StableDiffusionModel::model_hash() const {
  std::call_once(hash_once_, [this] { hash_ = cached_file_sha256(hash_file_).substr(0, 10); });
  return hash_;
}

std::shared_ptr<const StableDiffusionModel> StableDiffusionModel::load(const fs::path& path,
                                                                       const ModelLoadOptions& options) {
  if (!fs::exists(path)) fail("model '", path.string(), "' does not exist");
  if (!options.loras.empty()) {
    ModelLoadOptions base_options = options;
    base_options.loras.clear();
    return with_loras(load(path, base_options), options.loras);
  }
  auto model = std::make_shared<StableDiffusionModel>();
  model->path_ = path;
  model->dtype_ = options.dtype;
  const kernels::Precision precision = precision_of(options);

  if (fs::is_regular_file(path)) {
    SingleFileParts parts = load_single_file_parts(path, options);
    model->single_file_ = true;
    model->description_ = parts.description;
    model->hash_file_ = path;
    model->weights_bytes_ = static_cast<int64_t>(fs::file_size(path));
    model->tokenizer_ = std::make_shared<ClipTokenizer>(ClipTokenizer::from_folder(parts.tokenizer_dir));
    const std::vector<fs::path> files{path};
    model->keep_sources(*parts.unet, *parts.text_encoder);
    // The text encoder last, as for a folder (below).
    model->unet_ = std::make_shared<UNet2DCondition>(model->load_component(options, ModelComponent::UNet, files, *parts.unet, [&] {
      const PackedLayersScope record(model->recorder(ModelComponent::UNet));
      return UNet2DCondition::load(*parts.unet, parts.unet_config, precision);
    }));
    const ModelLoadOptions vae_options =
        vae_load_options(options, parts.vae_config, parts.text_encoder_2 != nullptr, &model->load_notes_);
    model->vae_ = std::make_shared<AutoencoderKL>(model->load_component(vae_options, ModelComponent::Vae, files, *parts.vae, [&] {
      return AutoencoderKL::load(*parts.vae, parts.vae_config, options.load_vae_encoder, precision_of(vae_options));
    }));
    model->text_encoder_ = std::make_shared<ClipTextModel>(
        model->load_component(options, ModelComponent::TextEncoder, files, *parts.text_encoder, [&] {
          const PackedLayersScope record(model->recorder(ModelComponent::TextEncoder));
          return ClipTextModel::load(*parts.text_encoder, parts.text_config);
        }));
    if (parts.text_encoder_2) {  // SDXL
      model->tokenizer_2_ = std::make_shared<ClipTokenizer>(ClipTokenizer::from_folder(parts.tokenizer_2_dir));
      model->text_encoder_2_source_ = std::make_shared<const WeightSource>(*parts.text_encoder_2);  // with_loras()
      model->text_encoder_2_ = std::make_shared<ClipTextModelWithProjection>(
          model->load_component(options, ModelComponent::TextEncoder2, files, *parts.text_encoder_2, [&] {
            const PackedLayersScope record(model->recorder(ModelComponent::TextEncoder2));
            return ClipTextModelWithProjection::load(*parts.text_encoder_2, parts.text_2_config);
          }));
    }
    model->set_scheduler_config(parts.scheduler_json, "the single-file scheduler configuration");
    release_freed_heap();
    model->load_tiny_autoencoder(options);
    model->decide_residency(options);
    model->finish_weight_caches_at_normal_priority();
    return model;
  }

  if (!fs::is_directory(path)) fail("model '", path.string(), "' is neither a file nor a folder");
  if (!fs::exists(path / "model_index.json") && !fs::exists(path / "unet"))
    fail("'", path.string(), "' is not a diffusers model folder (no model_index.json); give a folder "
         "with model_index.json or a single-file .safetensors checkpoint");
  const fs::path tok_dir = options.tokenizer_dir ? *options.tokenizer_dir : require_dir(path, "tokenizer");
  const fs::path te_dir = require_dir(path, "text_encoder");
  const fs::path unet_dir = require_dir(path, "unet");
  const fs::path vae_dir = require_dir(path, "vae");

  model->description_ = "diffusers folder";
  model->tokenizer_ = std::make_shared<ClipTokenizer>(ClipTokenizer::from_folder(tok_dir));

  const ComponentWeights te = open_component_weights(te_dir, "model", "flax_model.msgpack", FlaxNaming::Transformers,
                                                     options.variant, options.prefer_flax);
  const auto& te_files = te.files;
  auto te_w = te.source;
  auto te_cfg =
      ClipTextConfig::from_json(read_config(te_dir, "config.json"), (te_dir / "config.json").string());

  const ComponentWeights unet = open_component_weights(unet_dir, "diffusion_pytorch_model", "diffusion_flax_model.msgpack",
                                                       FlaxNaming::Diffusers, options.variant, options.prefer_flax);
  const auto& unet_files = unet.files;
  auto unet_w = unet.source;
  if (unet.flax_dtype) model->description_ = flax_format_description(*unet.flax_dtype);
  auto unet_cfg = UNetConfig::from_json(read_config(unet_dir, "config.json"), (unet_dir / "config.json").string());
  const int te2_width = model->load_sdxl_second_text_encoder(path, options);  // SDXL: 768 ‖ 1280
  if (unet_cfg.cross_attention_dim != te_cfg.hidden_size + te2_width)
    fail("the UNet expects text embeddings of width ", unet_cfg.cross_attention_dim, " but the text encoder",
         te2_width ? cat("s make ", te_cfg.hidden_size, " + ", te2_width) : cat(" makes ", te_cfg.hidden_size),
         " (are these components from the same model?)");
  if (unet_cfg.text_time() != model->is_sdxl())
    fail(unet_cfg.text_time() ? "the UNet is an SDXL UNet (addition_embed_type \"text_time\") but '"
                              : "the UNet has no SDXL text_time embedding but '",
         path.string(), unet_cfg.text_time() ? "' has no text_encoder_2/" : "' has a text_encoder_2/");
  model->keep_sources(*unet_w, *te_w);
  model->unet_ = std::make_shared<UNet2DCondition>(model->load_component(options, ModelComponent::UNet, unet_files, *unet_w, [&] {
    const PackedLayersScope record(model->recorder(ModelComponent::UNet));
    return UNet2DCondition::load(*unet_w, unet_cfg, precision);
  }));

  const ComponentWeights vae = open_component_weights(vae_dir, "diffusion_pytorch_model", "diffusion_flax_model.msgpack",
                                                      FlaxNaming::Diffusers, options.variant, options.prefer_flax);
  const auto& vae_files = vae.files;
  auto vae_w = vae.source;
  auto vae_cfg = VaeConfig::from_json(read_config(vae_dir, "config.json"), (vae_dir / "config.json").string());
  if (vae_cfg.latent_channels != unet_cfg.in_channels && unet_cfg.in_channels != 9)
    fail("the VAE has ", vae_cfg.latent_channels, " latent channels but the UNet takes ", unet_cfg.in_channels);
  const ModelLoadOptions vae_options = vae_load_options(options, vae_cfg, model->is_sdxl(), &model->load_notes_);
  model->vae_ = std::make_shared<AutoencoderKL>(model->load_component(vae_options, ModelComponent::Vae, vae_files, *vae_w, [&] {
    return AutoencoderKL::load(*vae_w, vae_cfg, options.load_vae_encoder, precision_of(vae_options));
  }));

  // The text encoder last: its weights stay float32 whatever the dtype (twice their size in an
  // fp16 file), and the first weights a load packs go to fresh pages, which on a VM whose host
  // backs new memory on first touch cost the most; packed after the UNet, it reuses the pages
  // the UNet's released source freed. Warm first loads of full-size SD 1.5, alternating (medians):
  // the fp16 single file in bf16 2.13 → 1.62 s and 2.46 → 2.19 s (system time 2.6 → 1.9 s,
  // 2.9 → 2.3 s); the f32 folder in bf16 1.59 → 1.72 s and 1.94 → 1.80 s, in f32 2.58 s both.
  model->text_encoder_ = std::make_shared<ClipTextModel>(
      model->load_component(options, ModelComponent::TextEncoder, te_files, *te_w, [&] {
        const PackedLayersScope record(model->recorder(ModelComponent::TextEncoder));
        return ClipTextModel::load(*te_w, te_cfg);
      }));

  if (const fs::path sched = path / "scheduler" / "scheduler_config.json"; fs::exists(sched))
    model->set_scheduler_config(read_text_file(sched), sched.string());
  model->hash_file_ = unet_files.front();
  for (const auto* list : {&te_files, &unet_files, &vae_files})
    for (const auto& f : *list) model->weights_bytes_ += static_cast<int64_t>(fs::file_size(f));
  if (options.load_safety_checker) {  // pipeline/safety_check.h
    std::string note;
    model->safety_checker_ = load_safety_checker(path, options.prefer_flax, &note);
    if (!note.empty()) model->load_notes_.push_back(note);
  }
  release_freed_heap();
  model->load_tiny_autoencoder(options);
  model->decide_residency(options);
  model->finish_weight_caches_at_normal_priority();
  return model;
}

}  // namespace octodiff
