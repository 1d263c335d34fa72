// octodiff-kernel-bench's main: Google Benchmark's, plus a JSON context that says which CPU and
// which kernel blocking (kernels/tuning.h) produced the results, and the peaks of_peak divides by.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_context.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/tuning.h"
#include "peak_flops.h"

namespace octodiff::bench {

// Under OCTODIFF_BENCH_CPU_TIME the peak too is measured against CPU time, as the rates are.
double peak_gflops(kernels::Precision precision) {
  static const bool cpu_time = std::getenv("OCTODIFF_BENCH_CPU_TIME") != nullptr;
  static const double f32 = measure_fp32_peak_gflops(current_device().threads, 0.5, cpu_time);
  static const double bf16 = measure_bf16_peak_gflops(current_device().threads, 0.5, cpu_time);
  return precision == kernels::Precision::BF16 && bf16 > 0 ? bf16 : f32;
}

void set_flops(benchmark::State& state, double flops_per_iter, kernels::Precision precision) {
  state.counters["FLOPS"] = benchmark::Counter(flops_per_iter, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.counters["of_peak"] =
      benchmark::Counter(flops_per_iter / (peak_gflops(precision) * 1e9), benchmark::Counter::kIsIterationInvariantRate);
}

namespace {

void add_context() {
  const kernels::CpuIdentity cpu = kernels::cpu_identity();
  const kernels::CacheSizes caches = kernels::cache_sizes();
  benchmark::AddCustomContext("octodiff_cpu", cat(cpu.vendor, " family ", cpu.family, " model ", cpu.model));
  benchmark::AddCustomContext("octodiff_caches", cat("L1D ", caches.l1d / 1024, " KiB, L2 ", caches.l2 / 1024,
                                                     " KiB, L3 ", caches.l3 / 1024, " KiB"));
  benchmark::AddCustomContext("octodiff_kernel_tuning", kernels::describe(kernels::kernel_tuning()));
  benchmark::AddCustomContext("octodiff_threads", std::to_string(current_device().threads));
  benchmark::AddCustomContext("octodiff_peak_fp32_gflops", std::to_string(peak_gflops(kernels::Precision::F32)));
  benchmark::AddCustomContext("octodiff_peak_bf16_gflops", std::to_string(peak_gflops(kernels::Precision::BF16)));
  static const bool cpu_time = std::getenv("OCTODIFF_BENCH_CPU_TIME") != nullptr;
  benchmark::AddCustomContext("octodiff_peak_vdpbf16ps_gflops",
                              std::to_string(measure_vdpbf16ps_peak_gflops(current_device().threads, 0.5, cpu_time)));
  benchmark::AddCustomContext("octodiff_bf16_products", bf16_products());
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
