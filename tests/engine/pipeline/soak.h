// The soak: one process runs many generations on the tiny model the way a long app session does —
// sizes, schedulers, f32/bf16 and LoRA sets changing from run to run (LoRAs switched with
// StableDiffusionModel::with_loras, a new pipeline per model as the app makes one), a third of
// the runs cancelled at a random step or from another thread at a random moment. Every run that
// completes must give exactly the images and latents a fresh model and pipeline give for the same
// request (nothing carried over from earlier runs, cancelled or not). RSS is reported, not asserted.
// soak_test.cpp runs 20 generations, soak_slow_test.cpp 200 (label slow; also run under LSan).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "core/device.h"
#include "core/error.h"
#include "pipeline/model.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

namespace octodiff::test {

// Resident set size of this process (VmRSS), in MiB.
inline double rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct SoakCase {
  ComputeDType dtype = ComputeDType::F32;
  int lora_set = 0;  // index into soak_lora_sets()
  int width = 64, height = 64;
  SchedulerKind scheduler = SchedulerKind::Pndm;
  int steps = 2;
  int64_t seed = 0;
  enum class Cancel { None, AtStep, FromThread } cancel = Cancel::None;
  int cancel_step = 0;        // AtStep: cancel when this many steps are done
  int cancel_after_us = 0;    // FromThread: cancel this long after the run starts
};

inline std::vector<std::vector<LoraSpec>> soak_lora_sets() {
  const auto dir = data_dir() / "tiny-sd-lora";
  return {{},
          {{dir / "kohya.safetensors", 1.0f}},
          {{dir / "peft.safetensors", 0.6f}},
          {{dir / "kohya_ldm.safetensors", 0.5f}, {dir / "diffusers_old.safetensors", 1.0f}}};
}

inline SoakCase random_soak_case(std::mt19937_64& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  static const std::pair<int, int> sizes[] = {{64, 64}, {32, 64}, {96, 64}, {64, 32}, {32, 32}};
  static const SchedulerKind schedulers[] = {SchedulerKind::Pndm,  SchedulerKind::Ddim,  SchedulerKind::Lms,
                                             SchedulerKind::DpmSolverPP, SchedulerKind::Euler,
                                             SchedulerKind::EulerAncestral};
  SoakCase c;
  c.dtype = pick(2) ? ComputeDType::BF16 : ComputeDType::F32;
  c.lora_set = pick(static_cast<int>(soak_lora_sets().size()));
  std::tie(c.width, c.height) = sizes[pick(5)];
  c.scheduler = schedulers[pick(6)];
  c.steps = 2 + pick(3);
  c.seed = pick(1000000);
  const int cancel = pick(6);
  if (cancel == 0) c.cancel = SoakCase::Cancel::AtStep, c.cancel_step = pick(c.steps);
  if (cancel == 1) c.cancel = SoakCase::Cancel::FromThread, c.cancel_after_us = pick(40000);
  return c;
}

inline std::string describe(const SoakCase& c) {
  return cat(c.dtype == ComputeDType::BF16 ? "bf16" : "f32", " lora set ", c.lora_set, " ", c.width, "x", c.height,
             " scheduler ", static_cast<int>(c.scheduler), " steps ", c.steps, " seed ", c.seed,
             c.cancel == SoakCase::Cancel::AtStep     ? cat(" cancel at step ", c.cancel_step)
             : c.cancel == SoakCase::Cancel::FromThread ? cat(" cancel after ", c.cancel_after_us, " us")
                                                        : std::string());
}

inline GenerationRequest soak_request(const SoakCase& c) {
  GenerationRequest r;
  r.prompts = {"a red circle on a blue square", "a lighthouse at dusk"};
  r.batch_per_device = 2;
  r.seed = c.seed;
  r.steps = c.steps;
  r.width = c.width;
  r.height = c.height;
  r.scheduler = c.scheduler;
  r.dtype = c.dtype;
  return r;
}

inline ModelLoadOptions soak_load_options(ComputeDType dtype, bool weight_cache) {
  ModelLoadOptions o;
  o.dtype = dtype;
  o.weight_cache = weight_cache;
  return o;
}

// The long-lived session: a base model per dtype, the current LoRA model and its pipeline.
class SoakSession {
 public:
  ShardedPipeline& pipeline_for(const SoakCase& c) {
    const int key = (c.dtype == ComputeDType::BF16 ? 100 : 0) + c.lora_set;
    if (key == current_key_) return *pipeline_;
    auto& base = bases_[c.dtype == ComputeDType::BF16];
    if (!base) base = StableDiffusionModel::load(tiny_sd_dir(), soak_load_options(c.dtype, true));
    pipeline_.reset();  // the previous model and its plans go, as when the app switches
    pipeline_ = std::make_unique<ShardedPipeline>(StableDiffusionModel::with_loras(base, soak_lora_sets()[c.lora_set]));
    current_key_ = key;
    return *pipeline_;
  }

 private:
  std::shared_ptr<const StableDiffusionModel> bases_[2];
  std::unique_ptr<ShardedPipeline> pipeline_;
  int current_key_ = -1;
};

// The same request on a model and pipeline made for it alone (loaded as a new process would,
// through the weight cache).
inline GenerationResult fresh_run(const SoakCase& c) {
  auto model = StableDiffusionModel::load(tiny_sd_dir(), soak_load_options(c.dtype, true));
  model = StableDiffusionModel::with_loras(model, soak_lora_sets()[c.lora_set]);
  return ShardedPipeline(model).run(soak_request(c));
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * 4) == 0;
}

struct SoakReport {
  int completed = 0, cancelled = 0, mismatches = 0;
  double rss_start_mib = 0, rss_after_first_mib = 0, rss_end_mib = 0, seconds = 0;
};

// One generation of the soak: runs it in the session (cancelling as the case says) and, if it
// completes, compares it with a fresh run. Adds to the report.
inline void soak_one(SoakSession& session, const SoakCase& c, SoakReport& report) {
  ShardedPipeline& pipeline = session.pipeline_for(c);
  CancelToken cancel;
  ProgressCallback progress = [&](const ProgressEvent& e) {
    if (c.cancel == SoakCase::Cancel::AtStep && e.phase == Phase::Denoise && e.step >= c.cancel_step) cancel.cancel();
  };
  std::thread canceller;
  if (c.cancel == SoakCase::Cancel::FromThread)
    canceller = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(c.cancel_after_us));
      cancel.cancel();
    });
  std::optional<GenerationResult> result;
  try {
    result = pipeline.run(soak_request(c), progress, {}, &cancel);
  } catch (const Cancelled&) {
    ++report.cancelled;
  }
  if (canceller.joinable()) canceller.join();
  if (c.cancel == SoakCase::Cancel::AtStep) {
    EXPECT_FALSE(result.has_value()) << "not cancelled: " << describe(c);
  }
  if (!result) return;
  ++report.completed;
  const GenerationResult fresh = fresh_run(c);
  const bool same = same_bits(result->images, fresh.images) && same_bits(result->final_latents, fresh.final_latents);
  if (!same) ++report.mismatches;
  EXPECT_TRUE(same) << "differs from a fresh run: " << describe(c);
}

inline SoakReport run_soak(int generations, uint64_t seed) {
  SoakReport report;
  std::mt19937_64 rng(seed);
  SoakSession session;
  report.rss_start_mib = rss_mib();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < generations; ++i) {
    const SoakCase c = random_soak_case(rng);
    soak_one(session, c, report);
    if (i == 0) report.rss_after_first_mib = rss_mib();
    if ((i + 1) % 20 == 0)
      std::printf("  after %3d generations: RSS %.1f MiB (%d completed, %d cancelled)\n", i + 1, rss_mib(),
                  report.completed, report.cancelled);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.rss_end_mib = rss_mib();
  std::printf("[soak] %d generations in %.1f s: %d completed (each identical to a fresh run: %s), %d cancelled; "
              "RSS start %.1f MiB, after the first %.1f MiB, end %.1f MiB\n",
              generations, report.seconds, report.completed, report.mismatches == 0 ? "yes" : "NO",
              report.cancelled, report.rss_start_mib, report.rss_after_first_mib, report.rss_end_mib);
  return report;
}

}  // namespace octodiff::test
