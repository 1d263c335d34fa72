// octodiff-kernel-bench's main: Google Benchmark's, plus a JSON context that says which CPU and
// which kernel blocking (kernels/tuning.h) produced the results, and the peaks of_peak divides by.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "bench_context.h"
#include "bench_timing.h"
#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/tuning.h"
#include "peak_flops.h"

namespace octodiff::bench {

// Under OCTODIFF_BENCH_CPU_TIME the peak too is measured against CPU time, as the rates are.
bool cpu_time_clock() {
  static const bool cpu_time = std::getenv("OCTODIFF_BENCH_CPU_TIME") != nullptr;
  return cpu_time;
}

double peak_gflops(kernels::Precision precision) {
  static const double f32 = measure_fp32_peak_gflops(current_device().threads, 0.5, cpu_time_clock());
  static const double bf16 = measure_bf16_peak_gflops(current_device().threads, 0.5, cpu_time_clock());
  return precision == kernels::Precision::BF16 && bf16 > 0 ? bf16 : f32;  // measure_peak_gflops' rule, measured once
}

double now_seconds() {
  if (!cpu_time_clock()) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void set_flops(benchmark::State& state, double flops_per_iter, kernels::Precision precision) {
  state.counters["FLOPS"] = benchmark::Counter(flops_per_iter, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.counters["of_peak"] =
      benchmark::Counter(flops_per_iter / (peak_gflops(precision) * 1e9), benchmark::Counter::kIsIterationInvariantRate);
}

namespace {

// OCTODIFF_BENCH_VERSUS applied to the tuning in use; checked once, before any benchmark runs.
const std::optional<kernels::KernelTuning>& versus_tuning() {
  static const std::optional<kernels::KernelTuning> t = []() -> std::optional<kernels::KernelTuning> {
    const char* spec = std::getenv("OCTODIFF_BENCH_VERSUS");
    if (!spec) return std::nullopt;
    try {
      return kernels::apply_kernel_tuning_overrides(kernels::kernel_tuning(), spec);
    } catch (const Error& e) {
      fail(cat("OCTODIFF_BENCH_VERSUS=\"", spec, "\": ", e.what()));
    }
  }();
  return t;
}

double adjacent_probe(kernels::Precision precision) {
  return measure_peak_gflops(precision == kernels::Precision::BF16, current_device().threads, 0.01, cpu_time_clock());
}

}  // namespace

void iterate(benchmark::State& state, double flops_per_iter, kernels::Precision precision,
             const std::function<void()>& call) {
  // The kernels' scratch (CallScratch) from a caching arena, as a network's layers get it from
  // the pipeline's: mapped and zeroed by one untimed call, reused by the timed ones. (Without it
  // every call paid for faulting its scratch in: a bf16 Winograd convolution at 64² × 64 spent a
  // fifth of its time in the kernel's page faults.)
  CachingArena arena;
  AllocatorScope arena_scope(&arena);
  call();
  const std::optional<kernels::KernelTuning>& versus = versus_tuning();
  static const bool adjacent = std::getenv("OCTODIFF_BENCH_ADJACENT_PEAK") != nullptr;
  if (!versus && !adjacent) {
    for (auto _ : state) call();
    set_flops(state, flops_per_iter, precision);
    return;
  }
  auto paused = [&](auto&& f) {
    state.PauseTiming();
    const auto r = f();
    state.ResumeTiming();
    return r;
  };
  auto timed = [&] {
    const double t0 = now_seconds();
    call();
    return now_seconds() - t0;
  };
  auto timed_versus = [&] {
    const kernels::ScopedKernelTuning scoped(*versus);
    return timed();
  };
  std::vector<double> ratios, fractions;
  double probe_before = adjacent ? adjacent_probe(precision) : 0;  // the clock starts with the loop
  for (auto _ : state) {
    const bool versus_first = versus && ratios.size() % 2 == 1;
    const double tv_before = versus_first ? paused(timed_versus) : 0.0;
    const double t = timed();
    if (versus) ratios.push_back(t / (versus_first ? tv_before : paused(timed_versus)));
    if (adjacent) {
      const double probe_after = paused([&] { return adjacent_probe(precision); });
      fractions.push_back(flops_per_iter / t / 1e9 / (0.5 * (probe_before + probe_after)));
      probe_before = probe_after;
    }
  }
  set_flops(state, flops_per_iter, precision);
  if (versus) {
    state.counters["versus_speedup"] = ratios.empty() ? 0.0 : median(ratios);
    state.counters["versus_pairs"] = static_cast<double>(ratios.size());
  }
  if (adjacent) state.counters["of_adjacent_peak"] = fractions.empty() ? 0.0 : median(fractions);
}

namespace {

void add_context() {
  const kernels::CpuIdentity cpu = kernels::cpu_identity();
  const kernels::CacheSizes caches = kernels::cache_sizes();
  benchmark::AddCustomContext("octodiff_cpu", cat(cpu.vendor, " family ", cpu.family, " model ", cpu.model));
  benchmark::AddCustomContext("octodiff_caches", cat("L1D ", caches.l1d / 1024, " KiB, L2 ", caches.l2 / 1024,
                                                     " KiB, L3 ", caches.l3 / 1024, " KiB"));
  benchmark::AddCustomContext("octodiff_kernel_tuning", kernels::describe(kernels::kernel_tuning()));
  benchmark::AddCustomContext("octodiff_probed_vdpbf16ps_over_fma",
                              std::to_string(kernels::probed_vdpbf16ps_over_fma()));
  benchmark::AddCustomContext("octodiff_threads", std::to_string(current_device().threads));
  benchmark::AddCustomContext("octodiff_peak_fp32_gflops", std::to_string(peak_gflops(kernels::Precision::F32)));
  benchmark::AddCustomContext("octodiff_peak_bf16_gflops", std::to_string(peak_gflops(kernels::Precision::BF16)));
  benchmark::AddCustomContext("octodiff_peak_vdpbf16ps_gflops",
                              std::to_string(measure_vdpbf16ps_peak_gflops(current_device().threads, 0.5, cpu_time_clock())));
  benchmark::AddCustomContext("octodiff_bf16_products", bf16_products());
  if (const auto& versus = versus_tuning()) benchmark::AddCustomContext("octodiff_versus_tuning", kernels::describe(*versus));
}

}  // namespace
}  // namespace octodiff::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    octodiff::bench::add_context();  // chooses the tuning: a bad OCTODIFF_KERNEL_TUNING stops here
  } catch (const octodiff::Error& e) {
    std::fprintf(stderr, "octodiff-kernel-bench: %s\n", e.what());
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
