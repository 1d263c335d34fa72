// octodiff-bench: end-to-end speed and memory of the engine on the full-size SD 1.5 architecture
// (random weights, made by `octodiff-cli make-random-model` when absent). Reports the machine's
// measured fp32 peak, compile time, text encoding, one UNet evaluation at batch 2 (a guided step)
// and batch 1, the VAE decode, achieved GFLOP/s from the analytic FLOP count of each network and
// the fraction of the measured peak (measured at start-up and again at the end; the larger
// counts), and peak RSS. Timings are medians of --repeats runs.
//
// --first-load warm|cold makes the load a first one (weights packed from the checkpoint into an
// empty weight-cache folder), so that "compile including weight packing" is measured: warm reads
// the checkpoint into the page cache first (the packing alone is timed), cold drops it from the
// page cache first and times a plain read of it too (what the disk alone needs).
//
// --arch sdxl gives the same guided-step report on a random full-size SDXL base (both text towers
// encode, the UNet gets its text_time conditioning; 1024×1024 unless --height/--width say otherwise).
//
// --arch sd-turbo | lcm-sd15 reports few-step models instead (few_step.h: one-pass steps, images
// and a 2×4 grid end to end with the SD VAE and with a tiny autoencoder, issue 20's ratio checks),
// in the JSON's "few_step" section; the default model is then a random full-size model of that
// architecture and --taesd (default: a random full-size TAESD) the tiny autoencoder.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/random_model_command.h"
#include "core/arena.h"
#include "core/cpu.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/files.h"
#include "kernels/tuning.h"
#include "bench_timing.h"
#include "controlnet.h"
#include "few_step.h"
#include "guided_step.h"
#include "peak_flops.h"
#include "vae_tiling.h"
#include "pipeline/controlnet.h"
#include "pipeline/model_hash.h"
#include "pipeline/sharded_pipeline.h"

namespace fs = std::filesystem;
using namespace octodiff;
using bench::Clock;

namespace {

struct Options {
  fs::path model;
  int threads = 0, devices = 1, height = 512, width = 512, repeats = 3, steps = 1;
  std::string dtype = "f32";
  std::string first_load;  // "", "warm" or "cold"
  std::string residency = "auto";  // WeightResidency: auto, minimal or resident
  std::string arch = "sd15";        // sd15 (the default report), sd-turbo or lcm-sd15 (few_step.h)
  std::string taesd;                // few-step modes: a TAESD folder/file, or "random" (the default)
  std::string controlnet;           // ControlNet mode (controlnet.h): a ControlNet folder/file or "random"
  std::string vae_tiling;           // VAE memory mode (vae_tiling.h): on, off or auto
  std::optional<double> img2img;    // --img2img [--strength S]: an image-to-image run beside text-to-image
  bool steps_given = false, size_given = false;
  std::optional<double> guidance;   // few-step modes: default per --arch
  bool json = false, skip_pipeline = false, skip_vae = false, skip_grid = false, load_only = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr,
               "octodiff-bench: %s\n"
               "usage: octodiff-bench [--model PATH] [--threads N] [--devices D] [--height H --width W]\n"
               "                      [--dtype f32|bf16] [--repeats N] [--steps S] [--skip-pipeline]\n"
               "                      [--skip-vae] [--first-load warm|cold] [--load-only]\n"
               "                      [--residency auto|minimal|resident] [--json]\n"
               "                      [--arch sd15|sdxl|sd-turbo|lcm-sd15] [--taesd PATH|random] [--guidance G] [--skip-grid]\n"
               "                      [--controlnet PATH|random] [--vae-tiling on|off|auto]\n"
               "                      [--img2img [--strength S]]\n"
               "  --img2img:    after the pipeline's text-to-image calls, the same request from an init image at\n"
               "                strength S (default 0.5; needs steps x S >= 1): seconds and the ratio to text-to-image\n"
               "  --vae-tiling: only the memory of one VAE decode at --height x --width (default 512x512), in tiles\n"
               "                (on), whole (off) or as the pipeline decides (auto); loads the VAE alone and times\n"
               "                nothing (vae_tiling.h): run it under /usr/bin/time -v\n"
               "  --controlnet: the ControlNet report instead (\"controlnet\" in the JSON): a ControlNet's cost per\n"
               "                guided step beside the UNet's, and both networks' analytic FLOPs; random = a random\n"
               "                full-size ControlNet of --arch (sd15 or sdxl: controlnet-canny-sdxl-1.0's shape; made once)\n"
               "  default model: a random full-size model of --arch in $OCTODIFF_CACHE_DIR/models (made when absent)\n"
               "  --arch:       sd15 (default): the guided-step report below; sdxl: the same for SDXL base (both\n"
               "                text towers, text_time UNet; 1024x1024 by default); sd-turbo (1 step, guidance 0) or\n"
               "                lcm-sd15 (4 steps, embedded guidance 8.5): the few-step report (\"few_step\" in the\n"
               "                JSON): networks alone, images and a 2x4 grid end to end, the issue-20 ratio checks;\n"
               "                --steps and --guidance override the architecture's settings; --skip-vae skips the\n"
               "                image decoded by the VAE end to end (its decode alone is still timed), --skip-grid\n"
               "                the 2x4 grid\n"
               "  --taesd:      the tiny autoencoder of the few-step report: a diffusers AutoencoderTiny folder or\n"
               "                madebyollin file, or random (default: a random full-size TAESD, made when absent)\n"
               "  --first-load: pack the weights afresh (empty weight cache); warm: the checkpoint is read\n"
               "                into the page cache first, cold: it is dropped from the page cache first\n"
               "  --load-only:  stop after the load (and the weight cache's write)\n"
               "  --residency:  keep weights mapped across phases (resident), drop each network after its\n"
               "                phase (minimal, the smallest peak RSS), or decide by size (auto, default)\n"
               "  --repeats N:  calls per network (default 3): *_first_call_seconds is the first call alone,\n"
               "                *_seconds the median of the later ones (all of them when N = 1)\n"
               "  --json:       only JSON on stdout (progress goes to stderr)\n",
               msg.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("option " + a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--model") o.model = value();
      else if (a == "--threads") o.threads = std::stoi(value());
      else if (a == "--devices") o.devices = std::stoi(value());
      else if (a == "--height") {
        o.height = std::stoi(value());
        o.size_given = true;
      } else if (a == "--width") {
        o.width = std::stoi(value());
        o.size_given = true;
      }
      else if (a == "--dtype") o.dtype = value();
      else if (a == "--repeats") o.repeats = std::max(1, std::stoi(value()));
      else if (a == "--steps") {
        o.steps = std::max(1, std::stoi(value()));
        o.steps_given = true;
      } else if (a == "--guidance") o.guidance = std::stod(value());
      else if (a == "--taesd") o.taesd = value();
      else if (a == "--controlnet") o.controlnet = value();
      else if (a == "--arch") {
        o.arch = value();
        if (o.arch != "sd15" && o.arch != "sdxl" && o.arch != "sd-turbo" && o.arch != "lcm-sd15")
          usage_error("--arch takes sd15, sdxl, sd-turbo or lcm-sd15");
      }
      else if (a == "--vae-tiling") o.vae_tiling = value();
      else if (a == "--img2img") o.img2img = o.img2img.value_or(0.5);
      else if (a == "--strength") o.img2img = std::stod(value());
      else if (a == "--json") o.json = true;
      else if (a == "--skip-pipeline") o.skip_pipeline = true;
      else if (a == "--skip-vae") o.skip_vae = true;
      else if (a == "--skip-grid") o.skip_grid = true;
      else if (a == "--load-only") o.load_only = true;
      else if (a == "--residency") {
        o.residency = value();
        if (o.residency != "auto" && o.residency != "minimal" && o.residency != "resident")
          usage_error("--residency takes auto, minimal or resident");
      }
      else if (a == "--first-load") {
        o.first_load = value();
        if (o.first_load != "warm" && o.first_load != "cold") usage_error("--first-load takes warm or cold");
      } else usage_error("unknown option " + a);
    } catch (const std::invalid_argument&) {
      usage_error("option " + a + " expects a number");
    }
  }
  const bool guided_report = o.arch == "sd15" || o.arch == "sdxl";
  if (guided_report && (!o.taesd.empty() || o.guidance || o.skip_grid))
    usage_error("--taesd, --guidance and --skip-grid are for the few-step report (--arch sd-turbo|lcm-sd15)");
  if (!guided_report && o.taesd.empty()) o.taesd = "random";
  if (o.arch == "sdxl" && !o.size_given) o.height = o.width = 1024;
  if (!o.controlnet.empty() && !guided_report) usage_error("--controlnet is for --arch sd15 or sdxl");
  if (o.img2img) {
    if (o.arch != "sd15" || o.skip_pipeline) usage_error("--img2img is for the sd15 pipeline report");
    if (!(*o.img2img > 0 && *o.img2img <= 1)) usage_error("--strength must be in (0, 1]");
    if (static_cast<int>(o.steps * *o.img2img) < 1)
      usage_error("--img2img runs int(steps x strength) steps: give --steps N with N x strength >= 1");
  }
  return o;
}

// The processor (bench results must say which CPU they were taken on: AMD family 25 is Zen 3/4,
// 26 is Zen 5): vendor, family and model from CPUID as the kernels read them to choose their
// blocking (kernels/tuning.h), the marketing name from /proc/cpuinfo.
nlohmann::json cpu_json() {
  nlohmann::json cpu = nlohmann::json::object();
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1) == "model name") {
      cpu["model_name"] = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      break;  // the first processor's is enough
    }
  }
  const kernels::CpuIdentity id = kernels::cpu_identity();
  cpu["vendor"] = id.vendor;
  cpu["family"] = id.family;
  cpu["model"] = id.model;
  if (id.vendor == "AuthenticAMD")
    cpu["core"] = id.family == 26 ? "Zen 5" : id.family == 25 ? "Zen 3/4" : "other AMD";
  if (id.vendor == "GenuineIntel" && id.family == 6)  // the server cores with AVX-512 BF16
    cpu["core"] = id.model == 143   ? "Sapphire Rapids"
                  : id.model == 207 ? "Emerald Rapids"
                  : id.model == 173 || id.model == 174 ? "Granite Rapids"
                                                       : "other Intel";
  // The kernels' blocking for this core (kernels/tuning.h; OCTODIFF_KERNEL_TUNING overrides it).
  cpu["kernel_tuning"] = kernels::describe(kernels::kernel_tuning());
  // VDPBF16PS's FLOP rate over FMA's as the tuning probed it at start-up (0: a measured core, or
  // no AVX-512 BF16): bf16 products on widened values where it is at most 0.75.
  cpu["probed_vdpbf16ps_over_fma"] = kernels::probed_vdpbf16ps_over_fma();
  return cpu;
}

// Runs fn with stdout pointing at stderr, so that `--json` output stays the only thing on stdout.
void with_stdout_on_stderr(const std::function<void()>& fn) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  try {
    fn();
  } catch (...) {
    std::fflush(stdout);
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
}

// The model's .safetensors files (a single file, or every one under a diffusers folder).
std::vector<fs::path> checkpoint_files(const fs::path& model) {
  std::vector<fs::path> files;
  if (fs::is_regular_file(model)) files.push_back(model);
  std::error_code ec;
  if (fs::is_directory(model))
    for (const auto& e : fs::recursive_directory_iterator(model, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  return files;
}

// The fraction of the model's .safetensors bytes in the page cache (mincore), so that a first load's
// time can be read as warm or cold: on a VM that pages out what it has not touched for a while, a
// checkpoint read minutes ago may be back on disk.
double page_cache_fraction(const fs::path& model) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t pages = 0, resident = 0;
  for (const auto& f : checkpoint_files(model)) {
    try {
      const MappedFile m(f);
      pages += (m.size() + page - 1) / page;
      resident += m.resident_pages(0, m.size());
    } catch (const Error&) {  // unreadable: the load reports it
    }
  }
  return pages ? static_cast<double>(resident) / static_cast<double>(pages) : 0.0;
}

// Drops the checkpoint's pages from the page cache (they are clean and unmapped, so the kernel
// lets them go without privileges): the next read comes from the disk.
void drop_from_page_cache(const fs::path& model) {
  for (const auto& f : checkpoint_files(model)) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // unreadable: the load reports it
    ::fdatasync(fd);  // a model just written has dirty pages, which DONTNEED would keep
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Reads every checkpoint file front to back (into the page cache); returns the bytes read.
uint64_t read_checkpoint(const fs::path& model) {
  std::vector<char> buf(8u << 20);
  uint64_t total = 0;
  for (const auto& f : checkpoint_files(model)) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open '", f.string(), "'");
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(fd);
        fail("cannot read '", f.string(), "'");
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  return total;
}

// An empty weight-cache folder for a first load, removed (with the cache it received) at exit.
struct ScratchWeightCache {
  fs::path dir;
  ScratchWeightCache() : dir(octodiff_cache_dir() / cat("bench-first-load-", ::getpid())) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (fs::create_directories(dir, ec); ec)
      fail("cannot create the weight-cache folder '", dir.string(), "' for --first-load: ", ec.message());
  }
  ~ScratchWeightCache() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A random full-size model of `arch` (make-random-model's names: sd15, sd-turbo, lcm-sd15, taesd)
// in the cache folder, written once. make-random-model writes README.md last: a folder without one
// is a write cut short, which make-random-model refuses to overwrite (the error names the folder).
fs::path random_model(const std::string& arch) {
  fs::path dir = octodiff_cache_dir() / "models" / (arch + "-random-f32");
  if (fs::exists(dir / "README.md")) return dir;
  std::fprintf(stderr, "octodiff-bench: writing a random full-size %s model to %s (once)\n", arch.c_str(), dir.c_str());
  fs::create_directories(dir.parent_path());
  int status = 1;
  with_stdout_on_stderr(
      [&] { status = run_make_random_model({"--arch", arch, "--layout", "diffusers", "--out", dir.string()}); });
  if (status != 0) fail("could not write the random model");
  return dir;
}



void print_load(const nlohmann::json& j) {
  if (j.contains("checkpoint_read_seconds"))
    std::printf("checkpoint read (%s, %.0f %% in the page cache before): %.2f GB in %.2f s = %.2f GB/s\n",
                j["first_load"].get<std::string>() == "cold" ? "from the disk" : "into the page cache",
                100.0 * j["checkpoint_cached_fraction_before_read"].get<double>(), j["checkpoint_bytes"].get<double>() / 1e9,
                j["checkpoint_read_seconds"].get<double>(), j["checkpoint_read_gb_per_s"].get<double>());
  if (j["load_from_cache"].get<bool>())
    std::printf("model load: %.2f s (packed weights mapped from the weight cache)\n", j["load_seconds"].get<double>());
  else
    std::printf("model load: %.2f s (weights read and packed; %.0f %% of the checkpoint was in the page cache), "
                "then %.2f s more writing the weight cache\n",
                j["load_seconds"].get<double>(), 100.0 * j["checkpoint_cached_fraction_before_load"].get<double>(),
                j["weight_cache_write_seconds"].get<double>());
}

// The fp32 and bf16 peaks measured at start-up (zero for --load-only, which has no use for them).
struct Peaks {
  double fp32 = 0, bf16 = 0;
};

// The fp32 and bf16 peaks measured again at the end, the larger of each kept (j gets both
// measurements); returns the peak that fractions of peak are taken against for `dtype`.
double measure_peaks_again(nlohmann::json& j, int threads, const Peaks& start, ComputeDType dtype) {
  std::fprintf(stderr, "measuring the peak again...\n");
  const double peak_end = bench::measure_fp32_peak_gflops(threads);
  const double bf16_peak_end = bench::measure_bf16_peak_gflops(threads);
  const double peak = std::max(start.fp32, peak_end), bf16_peak = std::max(start.bf16, bf16_peak_end);
  j["fp32_peak_gflops"] = peak;
  j["fp32_peak_gflops_start_end"] = {start.fp32, peak_end};
  j["bf16_peak_gflops"] = bf16_peak;
  j["bf16_peak_gflops_start_end"] = {start.bf16, bf16_peak_end};
  // bf16_peak_gflops is the rate of the instruction the bf16 kernels multiply with on this CPU.
  j["bf16_products"] = bench::bf16_products();
  return dtype == ComputeDType::BF16 && bf16_peak > 0 ? bf16_peak : peak;
}

void print_machine(const nlohmann::json& j, const StableDiffusionModel& model) {
  std::printf("machine: %s (%s), %d threads, %s, fp32 FMA peak %.0f GFLOP/s, bf16 peak %.0f GFLOP/s\n",
              j["cpu"].value("model_name", "?").c_str(), j["cpu"].value("core", "?").c_str(),
              j["threads"].get<int>(), j["isa"].get<std::string>().c_str(), j["fp32_peak_gflops"].get<double>(),
              j["bf16_peak_gflops"].get<double>());
  std::printf("times: %s; weights %s\n", j["seconds_statistic"].get<std::string>().c_str(),
              model.weights_stay_resident() ? "stay resident" : "dropped after each phase");
}

// --vae-tiling: the VAE decode's memory alone (vae_tiling.h), no peak measurement, nothing timed.
int run_vae_tiling_mode(const Options& o) {
  bench::VaeTilingOptions v;
  v.height = o.height;
  v.width = o.width;
  v.threads = o.threads;
  v.tiling.mode = parse_vae_tiling_mode(o.vae_tiling);
  v.dtype = parse_dtype_name(o.dtype);
  const fs::path model = o.model.empty() ? random_model("sd15") : o.model;
  nlohmann::json j = bench::run_vae_tiling_bench(model, v);
  j["model"] = model.string();
  j["dtype"] = o.dtype;
  if (o.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    bench::print_vae_tiling_bench(j);
  return 0;
}

// The report's first keys: the machine and how the times are taken.
nlohmann::json machine_json(const Options& o, int threads, ComputeDType dtype) {
  nlohmann::json j;
  j["threads"] = threads;
  j["dtype"] = dtype_display_name(dtype);
  j["isa"] = isa_name(best_isa());
  j["cpu"] = cpu_json();
  j["repeats"] = o.repeats;
  j["seconds_statistic"] = o.repeats == 1 ? "the one call"
                                          : "median of the calls after the first (the first: *_first_call_seconds)";
  return j;
}

// Measured again at the end, and the larger value kept: a short measurement taken while
// something else held a core (e.g. the kernel writing back a previous run's weight cache)
// would halve the peak and double every fraction. A --load-only run has no use for it.
Peaks measure_start_peaks(const Options& o, int threads) {
  Peaks start;
  if (!o.load_only) {
    std::fprintf(stderr, "measuring the fp32 FMA peak on %d threads...\n", threads);
    start.fp32 = bench::measure_fp32_peak_gflops(threads);
    start.bf16 = bench::measure_bf16_peak_gflops(threads);
  }
  return start;
}

// --taesd, --dtype, --img2img (the VAE's encoder) and --residency as the load's options.
ModelLoadOptions bench_load_options(const Options& o, ComputeDType dtype, nlohmann::json& j) {
  ModelLoadOptions load_options;
  if (!o.taesd.empty()) {
    load_options.tiny_autoencoder = o.taesd == "random" ? random_model("taesd") : fs::path(o.taesd);
    j["taesd"] = load_options.tiny_autoencoder->string();
  }
  load_options.dtype = dtype;  // UNet and VAE weights packed as bf16 for --dtype bf16
  load_options.load_vae_encoder = o.img2img.has_value();
  load_options.residency = parse_weight_residency(o.residency);
  return load_options;
}

// --first-load: an empty weight-cache folder for the load, and the checkpoint's read alone, timed:
// from the disk (cold, then dropped again so that the load reads it from the disk too) or from
// the page cache (warm, where it stays for the load).
void prepare_first_load(const Options& o, const fs::path& model_path, ModelLoadOptions& load_options,
                        std::optional<ScratchWeightCache>& scratch_cache, nlohmann::json& j) {
  j["first_load"] = o.first_load.empty() ? "no" : o.first_load;
  if (o.first_load.empty()) return;
  scratch_cache.emplace();
  load_options.weight_cache_dir = scratch_cache->dir;
  if (o.first_load == "cold") drop_from_page_cache(model_path);
  j["checkpoint_cached_fraction_before_read"] = page_cache_fraction(model_path);
  const auto r0 = Clock::now();
  const uint64_t bytes = read_checkpoint(model_path);
  const double read_s = std::chrono::duration<double>(Clock::now() - r0).count();
  j["checkpoint_bytes"] = bytes;
  j["checkpoint_read_seconds"] = read_s;
  j["checkpoint_read_gb_per_s"] = bytes / 1e9 / read_s;
  if (o.first_load == "cold") drop_from_page_cache(model_path);
}

// The model of --model (default: a random full-size one of --arch), loaded and timed; j gets the
// load's figures. scratch_cache: the --first-load weight cache, which must outlive the model.
std::shared_ptr<const StableDiffusionModel> load_model(const Options& o, ComputeDType dtype,
                                                       std::optional<ScratchWeightCache>& scratch_cache,
                                                       nlohmann::json& j) {
  const fs::path model_path = o.model.empty() ? random_model(o.arch) : o.model;
  j["arch"] = o.arch;
  ModelLoadOptions load_options = bench_load_options(o, dtype, j);
  prepare_first_load(o, model_path, load_options, scratch_cache, j);
  j["checkpoint_cached_fraction_before_load"] = page_cache_fraction(model_path);
  auto t0 = Clock::now();
  auto model = StableDiffusionModel::load(model_path, load_options);
  j["model"] = model_path.string();
  j["load_seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
  j["load_from_cache"] = model->loaded_from_cache(ModelComponent::UNet);
  j["weight_residency"] = {{"asked", o.residency},
                           {"weights_stay_resident", model->weights_stay_resident()},
                           {"cached_weight_mb", model->cached_weight_bytes() / 1048576.0}};
  // A first load writes its weight cache in the background; wait for it so that the disk
  // writes do not share the timed runs' cores, and report that time on its own.
  j["weight_cache_write_seconds"] = model->wait_for_weight_caches();
  for (const auto& note : model->load_notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
  j["rss_after_load_mb"] = current_rss_bytes() / 1048576.0;
  j["peak_rss_after_load_mb"] = peak_rss_bytes() / 1048576.0;
  std::fprintf(stderr, "loaded %s in %.1f s (%s; %.0f %% of its weight files were in the page cache)\n",
               model_path.c_str(), j["load_seconds"].get<double>(),
               j["load_from_cache"].get<bool>() ? "packed weights from the weight cache" : "packed now",
               100.0 * j["checkpoint_cached_fraction_before_load"].get<double>());
  return model;
}

// --load-only: the load's figures alone.
int report_load_only(const Options& o, nlohmann::json& j) {
  j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
  if (o.json) std::printf("%s\n", j.dump(2).c_str());
  else print_load(j);
  return 0;
}

// --controlnet: the ControlNet report (controlnet.h) in j's "controlnet" section.
int run_controlnet_mode(const Options& o, const StableDiffusionModel& model, int threads, ComputeDType dtype,
                        nlohmann::json& j) {
  const fs::path cn_path = o.controlnet == "random" ? random_model("controlnet-" + o.arch) : fs::path(o.controlnet);
  const auto cn = load_controlnet(cn_path, dtype);
  j["controlnet"] = bench::run_controlnet_bench(model, *cn, {o.height, o.width, threads, o.repeats});
  j["controlnet"]["model"] = cn_path.string();
  j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_load(j);
    bench::print_controlnet_bench(j["controlnet"]);
    std::printf("peak RSS: %.0f MB\n", j["peak_rss_mb"].get<double>());
  }
  return 0;
}

// --arch sd-turbo|lcm-sd15: the few-step report (few_step.h) in j's "few_step" section.
int run_few_step_mode(const Options& o, const std::shared_ptr<const StableDiffusionModel>& model, int threads,
                      ComputeDType dtype, const Peaks& start, nlohmann::json& j) {
  bench::FewStepOptions f = bench::few_step_defaults(o.arch);
  if (o.steps_given) f.steps = o.steps;
  if (o.guidance) f.guidance = *o.guidance;
  f.height = o.height;
  f.width = o.width;
  f.threads = threads;
  f.repeats = o.repeats;
  f.dtype = dtype;
  f.grid = !o.skip_grid;
  f.image_vae = !o.skip_vae;
  j["few_step"] = bench::run_few_step(model, f);
  j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
  const double ref_peak = measure_peaks_again(j, threads, start, dtype);
  for (const char* k : {"unet_b1", "vae_decode", "taesd_decode"}) {
    nlohmann::json& n = j["few_step"]["networks"];
    n[std::string(k) + "_fraction_of_peak"] = n[std::string(k) + "_gflops"].get<double>() / ref_peak;
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_machine(j, *model);
    print_load(j);
    bench::print_few_step(j["few_step"]);
    std::printf("peak RSS: %.0f MB\n", j["peak_rss_mb"].get<double>());
  }
  return 0;
}

// The default report (--arch sd15|sdxl, guided_step.h) on j's top level, as text or JSON.
void print_guided_report(const Options& o, const nlohmann::json& j, const StableDiffusionModel& model) {
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  print_machine(j, model);
  if (j.contains("compile_seconds"))
    std::printf("compile: %.3f s first call, %.3f s cached\n", j["compile_seconds"].get<double>(),
                j["cached_compile_seconds"].get<double>());
  print_load(j);
  if (j.contains("compile_with_packing_seconds"))
    std::printf("compile including weight packing: %.2f s\n", j["compile_with_packing_seconds"].get<double>());
  bench::print_networks(j);
  std::printf("peak RSS: %.0f MB\n", j["peak_rss_mb"].get<double>());
}

// --arch sd15|sdxl: the pipeline (unless --skip-pipeline), then the networks alone (guided_step.h).
int run_guided_mode(const Options& o, const std::shared_ptr<const StableDiffusionModel>& model, int threads,
                    ComputeDType dtype, const Peaks& start, nlohmann::json& j) {
  bench::GuidedStepOptions g;
  g.height = o.height;
  g.width = o.width;
  g.threads = threads;
  g.repeats = o.repeats;
  g.devices = o.devices;
  g.steps = o.steps;
  g.dtype = dtype;
  g.skip_vae = o.skip_vae;
  g.img2img = o.img2img;
  DeviceScope scope(DeviceContext{0, threads, nullptr});
  if (!o.skip_pipeline) bench::time_pipeline(model, g, j);
  // Activations come from a caching arena, as in a compiled pipeline plan: after the first call
  // no memory is requested from the system (the median excludes that first call's page faults
  // only when --repeats >= 3).
  CachingArena arena;
  AllocatorScope arena_scope(&arena);
  bench::time_networks(*model, g, arena, j);
  const double ref_peak = measure_peaks_again(j, threads, start, dtype);
  for (const char* k : {"unet_b2", "unet_b1", "vae_decode"})
    if (j.contains(std::string(k) + "_gflops"))
      j[std::string(k) + "_fraction_of_peak"] = j[std::string(k) + "_gflops"].get<double>() / ref_peak;
  print_guided_report(o, j, *model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    if (!o.vae_tiling.empty()) return run_vae_tiling_mode(o);
    const int threads = o.threads > 0 ? o.threads : hardware_threads();
    const ComputeDType dtype = parse_dtype_name(o.dtype);
    nlohmann::json j = machine_json(o, threads, dtype);
    const Peaks start = measure_start_peaks(o, threads);
    std::optional<ScratchWeightCache> scratch_cache;  // --first-load's weight cache, removed at exit
    const auto model = load_model(o, dtype, scratch_cache, j);
    if (o.load_only) return report_load_only(o, j);
    if (!o.controlnet.empty()) return run_controlnet_mode(o, *model, threads, dtype, j);
    if (o.arch != "sd15" && o.arch != "sdxl") return run_few_step_mode(o, model, threads, dtype, start, j);
    return run_guided_mode(o, model, threads, dtype, start, j);
  } catch (const Error& e) {
    std::fprintf(stderr, "octodiff-bench: error: %s\n", e.what());
    return 1;
  }
}
