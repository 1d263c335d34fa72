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
#include "kernels/gemm.h"
#include "models/flop_count.h"
#include "bench_timing.h"
#include "controlnet.h"
#include "few_step.h"
#include "peak_flops.h"
#include "vae_tiling.h"
#include "pipeline/controlnet.h"
#include "pipeline/model_hash.h"
#include "pipeline/sdxl_prompt_encoding.h"
#include "pipeline/sharded_pipeline.h"

namespace fs = std::filesystem;
using namespace octodiff;
using bench::Clock;
using bench::pseudo_random;
using bench::steady_median_seconds;

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

// The processor, as /proc/cpuinfo names it (bench results must say which CPU they were taken on:
// AMD family 25 is Zen 3/4, 26 is Zen 5).
nlohmann::json cpu_json() {
  nlohmann::json cpu = nlohmann::json::object();
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (!cpu.empty()) break;  // the first processor's block is enough
      continue;
    }
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name") cpu["model_name"] = value;
    if (key == "vendor_id") cpu["vendor"] = value;
    if (key == "cpu family") cpu["family"] = std::atoi(value.c_str());
    if (key == "model") cpu["model"] = std::atoi(value.c_str());
  }
  if (cpu.value("vendor", "") == "AuthenticAMD" && cpu.contains("family"))
    cpu["core"] = cpu["family"] == 26 ? "Zen 5" : cpu["family"] == 25 ? "Zen 3/4" : "other AMD";
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

// The fp32 and bf16 peaks measured again at the end, the larger of each kept (j gets both
// measurements); returns the peak that fractions of peak are taken against for `dtype`.
double measure_peaks_again(nlohmann::json& j, int threads, double peak_start, double bf16_peak_start,
                           ComputeDType dtype) {
  std::fprintf(stderr, "measuring the peak again...\n");
  const double peak_end = bench::measure_fp32_peak_gflops(threads);
  const double bf16_peak_end = bench::measure_bf16_peak_gflops(threads);
  const double peak = std::max(peak_start, peak_end), bf16_peak = std::max(bf16_peak_start, bf16_peak_end);
  j["fp32_peak_gflops"] = peak;
  j["fp32_peak_gflops_start_end"] = {peak_start, peak_end};
  j["bf16_peak_gflops"] = bf16_peak;
  j["bf16_peak_gflops_start_end"] = {bf16_peak_start, bf16_peak_end};
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

// --img2img: the pipeline's request again from an init image (the text-to-image run's first image,
// so that the encoder sees a picture) at `strength`: first and second call, and the second call's
// time over text-to-image's second call at the same steps (issue 22: about the strength's share).
nlohmann::json img2img_report(ShardedPipeline& pipe, GenerationRequest req, const GenerationResult& text_to_image,
                              double strength) {
  req.init_images = {to_uint8(text_to_image.images.data(), req.height, req.width)};
  req.strength = strength;
  std::fprintf(stderr, "pipeline: image to image at strength %g, first call...\n", strength);
  const GenerationResult first = pipe.run(req);
  std::fprintf(stderr, "pipeline: image to image, second call...\n");
  const GenerationResult second = pipe.run(req);
  return {{"strength", strength},
          {"steps", req.steps},
          {"model_calls", second.model_calls},
          {"text_to_image_model_calls", text_to_image.model_calls},
          {"first_call_seconds", first.timings.total},
          {"second_call_seconds", second.timings.total},
          {"encode_image_seconds", second.timings.encode_image},
          {"text_to_image_second_call_seconds", text_to_image.timings.total},
          {"ratio_to_text_to_image", second.timings.total / text_to_image.timings.total},
          {"peak_rss_mb", second.peak_rss_bytes / 1048576.0}};
}

}  // namespace

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

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    if (!o.vae_tiling.empty()) return run_vae_tiling_mode(o);
    const int threads = o.threads > 0 ? o.threads : hardware_threads();
    const ComputeDType dtype = parse_dtype_name(o.dtype);
    nlohmann::json j;
    j["threads"] = threads;
    j["dtype"] = dtype_display_name(dtype);
    j["isa"] = isa_name(best_isa());
    j["cpu"] = cpu_json();
    j["repeats"] = o.repeats;
    j["seconds_statistic"] = o.repeats == 1 ? "the one call"
                                            : "median of the calls after the first (the first: *_first_call_seconds)";
    // Measured again at the end, and the larger value kept: a short measurement taken while
    // something else held a core (e.g. the kernel writing back a previous run's weight cache)
    // would halve the peak and double every fraction. A --load-only run has no use for it.
    double peak_start = 0, bf16_peak_start = 0;
    if (!o.load_only) {
      std::fprintf(stderr, "measuring the fp32 FMA peak on %d threads...\n", threads);
      peak_start = bench::measure_fp32_peak_gflops(threads);
      bf16_peak_start = bench::measure_bf16_peak_gflops(threads);
    }

    const fs::path model_path = o.model.empty() ? random_model(o.arch) : o.model;
    j["arch"] = o.arch;
    ModelLoadOptions load_options;
    if (!o.taesd.empty()) {
      load_options.tiny_autoencoder = o.taesd == "random" ? random_model("taesd") : fs::path(o.taesd);
      j["taesd"] = load_options.tiny_autoencoder->string();
    }
    load_options.dtype = dtype;  // UNet and VAE weights packed as bf16 for --dtype bf16
    load_options.load_vae_encoder = o.img2img.has_value();
    load_options.residency = parse_weight_residency(o.residency);
    std::optional<ScratchWeightCache> scratch_cache;
    j["first_load"] = o.first_load.empty() ? "no" : o.first_load;
    if (!o.first_load.empty()) {
      scratch_cache.emplace();
      load_options.weight_cache_dir = scratch_cache->dir;
      // The checkpoint's read alone, timed: from the disk (cold, then dropped again so that the
      // load reads it from the disk too) or from the page cache (warm, where it stays for the load).
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
    if (o.load_only) {
      j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
      if (o.json) std::printf("%s\n", j.dump(2).c_str());
      else print_load(j);
      return 0;
    }

    if (!o.controlnet.empty()) {
      const fs::path cn_path =
          o.controlnet == "random" ? random_model("controlnet-" + o.arch) : fs::path(o.controlnet);
      const auto cn = load_controlnet(cn_path, dtype);
      j["controlnet"] = bench::run_controlnet_bench(*model, *cn, {o.height, o.width, threads, o.repeats});
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

    if (o.arch != "sd15" && o.arch != "sdxl") {
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
      const double ref_peak = measure_peaks_again(j, threads, peak_start, bf16_peak_start, dtype);
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

    const int vsf = model->vae_scale_factor();
    const int64_t h = o.height / vsf, w = o.width / vsf;
    const auto& uc = model->unet().config();
    const Numerics numerics{Flavour::Flax};
    DeviceScope scope(DeviceContext{0, threads, nullptr});

    // The pipeline: first call compiles, second reuses the plan.
    if (!o.skip_pipeline) {
      ShardedPipeline pipe(model);
      GenerationRequest req;
      req.prompts = {"a photograph of an astronaut riding a horse"};
      req.devices = o.devices;
      req.height = o.height;
      req.width = o.width;
      req.steps = o.steps;
      req.threads = threads;
      req.dtype = dtype;
      std::fprintf(stderr, "pipeline: %d device(s), %d step(s), first call...\n", o.devices, o.steps);
      GenerationResult first = pipe.run(req);
      std::fprintf(stderr, "pipeline: second call...\n");
      GenerationResult second = pipe.run(req);
      j["compile_seconds"] = first.timings.compile;
      j["cached_compile_seconds"] = second.timings.compile;
      // What a model's first use costs before its first step: packing every weight (the load,
      // when it packed) and the plan. With the weight cache, later loads pack nothing.
      if (!j["load_from_cache"].get<bool>())
        j["compile_with_packing_seconds"] = j["load_seconds"].get<double>() + first.timings.compile;
      j["pipeline"] = {{"devices", o.devices},
                       {"steps", o.steps},
                       {"first_call_seconds", first.timings.total},
                       {"second_call_seconds", second.timings.total},
                       {"text_encode_seconds", second.timings.text_encode},
                       {"mean_step_seconds", second.timings.mean_step},
                       {"step_seconds", second.timings.step},
                       {"decode_seconds", second.timings.decode},
                       {"concurrent_devices", second.concurrent_devices},
                       {"threads_per_device", second.threads_per_device}};
      if (o.img2img) j["img2img"] = img2img_report(pipe, req, second, *o.img2img);
    }

    // Activations come from a caching arena, as in a compiled pipeline plan: after the first call
    // no memory is requested from the system (the median excludes that first call's page faults
    // only when --repeats >= 3).
    CachingArena arena;
    AllocatorScope arena_scope(&arena);

    // Text encoder: [uncond; cond] = 2 sequences of 77 tokens, the empty prompt and a prompt.
    std::vector<int32_t> ids = model->tokenizer().encode("").ids;
    const std::vector<int32_t> cond = model->tokenizer().encode("a photograph of an astronaut riding a horse").ids;
    ids.insert(ids.end(), cond.begin(), cond.end());
    Tensor context;
    UNetTextTime text_time;  // SDXL: pooled embeddings and time ids of the same two rows
    // Phases as the pipeline runs them: each network's weights are mapped in before it runs and
    // dropped (with the arena's free blocks) after, so only one network is resident at a time.
    auto end_phase = [&](ModelComponent c) {
      model->release(c);
      arena.trim();
    };
    model->prefetch(ModelComponent::TextEncoder);
    j["text_encode_seconds"] = steady_median_seconds(o.repeats, [&] {
      if (!model->is_sdxl()) {
        context = model->text_encoder().forward(ids, 2, 77).last_hidden_state;
        return;
      }
      const SdxlTokenizedPrompts tokens = tokenize_sdxl_prompts(
          model->tokenizer(), model->tokenizer_2(), {"a photograph of an astronaut riding a horse"}, {""}, false);
      SdxlConditioning c = encode_sdxl_device_prompts(model->text_encoder(), model->text_encoder_2(), tokens, 0, 1,
                                                      true, sdxl_time_ids({}, o.height, o.width));
      context = std::move(c.context);
      text_time = std::move(c.text_time);
    });
    end_phase(ModelComponent::TextEncoder);
    model->prefetch(ModelComponent::UNet);

    // UNet at batch 2 (a guided step) and batch 1.
    for (int batch : {2, 1}) {
      // Batch 2 is a guided step: the same latents with the negative and the positive prompt.
      const Tensor latents = pseudo_random({1, h, w, uc.in_channels}, 7);
      Tensor x = Tensor::empty({batch, h, w, uc.in_channels});
      for (int n = 0; n < batch; ++n) std::copy(latents.begin(), latents.end(), x.data() + n * latents.numel());
      Tensor ctx = context.slice0(0, batch);
      const UNetTextTime tt{model->is_sdxl() ? text_time.text_embeds.slice0(0, batch) : Tensor(),
                            model->is_sdxl() ? text_time.time_ids.slice0(0, batch) : Tensor()};
      const UNetTextTime* tt_arg = model->is_sdxl() ? &tt : nullptr;
      std::fprintf(stderr, "UNet batch %d at %lldx%lld latents...\n", batch, static_cast<long long>(h),
                   static_cast<long long>(w));
      std::vector<size_t> misses;  // blocks the arena had to get from the system, per call
      std::vector<double> calls;
      const double s = steady_median_seconds(
          o.repeats,
          [&] {
            const size_t before = arena.system_allocations();
            model->unet().forward_nhwc(x, std::vector<double>(batch, 500.0), ctx, nullptr, numerics, nullptr,
                                       nullptr, tt_arg);
            misses.push_back(arena.system_allocations() - before);
          },
          &calls);
      const double gflop = unet_flops(uc, batch, h, w) / 1e9;
      const std::string k = "unet_b" + std::to_string(batch);
      j[k + "_seconds"] = s;
      j[k + "_call_seconds"] = calls;
      j[k + "_first_call_seconds"] = calls.front();
      j[k + "_gflop"] = gflop;
      j[k + "_gflops"] = gflop / s;
      // The figures above count the whole network for every sample. The guided step's second
      // half shares the text-free first layers with the first (UNet2DCondition::forward_nhwc), so
      // fewer products are executed: reported too, so that neither reads as the other.
      const double executed = gflop - (batch - 1) * unet_text_free_flops(uc, h, w) / 1e9;
      j[k + "_executed_gflop"] = executed;
      j[k + "_executed_gflops"] = executed / s;
      j[k + "_arena_misses_per_call"] = misses;
      if (batch == 2 && dtype == ComputeDType::BF16) {
        // A bf16 run's first call, as the pipeline makes it: activations split in two bf16
        // halves (kernels/gemm.h), twice the products.
        const kernels::ScopedBf16Activations split(kernels::Bf16Activations::Split);
        std::vector<double> split_calls;
        j["unet_b2_split_seconds"] = steady_median_seconds(
            o.repeats,
            [&] {
              model->unet().forward_nhwc(x, std::vector<double>(batch, 500.0), ctx, nullptr, numerics, nullptr,
                                         nullptr, tt_arg);
            },
            &split_calls);
        j["unet_b2_split_call_seconds"] = split_calls;
      }
    }
    j["peak_rss_after_unet_mb"] = peak_rss_bytes() / 1048576.0;
    {
      // Resident memory while the UNet's weights are still mapped: file-backed (the weights, from
      // the weight cache) and anonymous (activations, everything else).
      std::ifstream st("/proc/self/status");
      std::string line;
      while (std::getline(st, line)) {
        if (line.rfind("RssAnon:", 0) == 0) j["rss_anon_after_unet_mb"] = std::stod(line.substr(8)) / 1024.0;
        if (line.rfind("RssFile:", 0) == 0) j["rss_file_after_unet_mb"] = std::stod(line.substr(8)) / 1024.0;
      }
    }
    j["arena_peak_after_unet_mb"] = arena.peak_bytes_reserved() / 1048576.0;
    j["arena_peak_in_use_after_unet_mb"] = arena.peak_bytes_in_use() / 1048576.0;
    end_phase(ModelComponent::UNet);

    if (!o.skip_vae) {
      Tensor z = pseudo_random({1, h, w, model->vae().config().latent_channels}, 11);
      std::fprintf(stderr, "VAE decode %dx%d...\n", o.width, o.height);
      model->prefetch(ModelComponent::Vae);
      std::vector<double> calls;
      const double s = steady_median_seconds(o.repeats, [&] { model->vae().decode_nhwc(z); }, &calls);
      const double gflop = vae_decode_flops(model->vae().config(), 1, h, w) / 1e9;
      j["vae_decode_seconds"] = s;
      j["vae_decode_call_seconds"] = calls;
      j["vae_decode_first_call_seconds"] = calls.front();
      j["vae_decode_gflop"] = gflop;
      j["vae_decode_gflops"] = gflop / s;
      end_phase(ModelComponent::Vae);
    }
    j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
    j["arena_peak_mb"] = arena.peak_bytes_reserved() / 1048576.0;

    const double ref_peak = measure_peaks_again(j, threads, peak_start, bf16_peak_start, dtype);
    for (const char* k : {"unet_b2", "unet_b1", "vae_decode"})
      if (j.contains(std::string(k) + "_gflops"))
        j[std::string(k) + "_fraction_of_peak"] = j[std::string(k) + "_gflops"].get<double>() / ref_peak;

    if (o.json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_machine(j, *model);
      if (j.contains("compile_seconds"))
        std::printf("compile: %.3f s first call, %.3f s cached\n", j["compile_seconds"].get<double>(),
                    j["cached_compile_seconds"].get<double>());
      print_load(j);
      if (j.contains("compile_with_packing_seconds"))
        std::printf("compile including weight packing: %.2f s\n", j["compile_with_packing_seconds"].get<double>());
      std::printf("text encoding (2×77): %.3f s\n", j["text_encode_seconds"].get<double>());
      for (const char* k : {"unet_b2", "unet_b1", "vae_decode"}) {
        if (!j.contains(std::string(k) + "_seconds")) continue;
        std::string calls;  // every call, for the spread around the median
        for (const auto& c : j[std::string(k) + "_call_seconds"]) {
          char t[32];
          std::snprintf(t, sizeof t, "%s%.2f", calls.empty() ? "" : " ", c.get<double>());
          calls += t;
        }
        std::printf("%-11s %8.2f s  %7.1f GFLOP  %6.1f GFLOP/s  %5.1f %% of peak  (first call %.2f s; calls: %s s)\n",
                    k, j[std::string(k) + "_seconds"].get<double>(), j[std::string(k) + "_gflop"].get<double>(),
                    j[std::string(k) + "_gflops"].get<double>(),
                    100 * j[std::string(k) + "_fraction_of_peak"].get<double>(),
                    j[std::string(k) + "_first_call_seconds"].get<double>(), calls.c_str());
      }
      if (j.contains("unet_b2_split_seconds"))
        std::printf("unet_b2 with split bf16 activations (a bf16 run's first call): %.2f s\n",
                    j["unet_b2_split_seconds"].get<double>());
      if (j.contains("img2img")) {
        const nlohmann::json& i = j["img2img"];
        std::printf("img2img strength %g, %d steps (%d UNet calls vs %d): %.2f s, %.2f x text-to-image (%.2f s)\n",
                    i["strength"].get<double>(), i["steps"].get<int>(), i["model_calls"].get<int>(),
                    i["text_to_image_model_calls"].get<int>(), i["second_call_seconds"].get<double>(),
                    i["ratio_to_text_to_image"].get<double>(), i["text_to_image_second_call_seconds"].get<double>());
      }
      std::printf("peak RSS: %.0f MB\n", j["peak_rss_mb"].get<double>());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "octodiff-bench: error: %s\n", e.what());
    return 1;
  }
}
