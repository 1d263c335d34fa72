#include "peak_flops.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/cpu.h"
#include "kernels/isa.h"
#include "kernels/throughput_probe.h"

namespace octodiff::bench {
namespace {

using kernels::ThroughputLoop;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Runs `loop` on `threads` threads at once, repeatedly, for about `seconds`; best rate wins.
// With cpu_time, each thread's flops count against its own CPU time (summed over threads).
double measure(ThroughputLoop loop, int threads, double seconds, bool cpu_time) {
  const int64_t chunk = 2'000'000;
  double best = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::atomic<int64_t> flops{0};
    std::vector<std::thread> pool;
    std::vector<float> sinks(threads);
    std::vector<double> cpu_rates(threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const double c0 = thread_cpu_seconds();
        const int64_t f = loop(chunk, &sinks[t]);
        cpu_rates[t] = static_cast<double>(f) / std::max(1e-9, thread_cpu_seconds() - c0) / 1e9;
        flops += f;
      });
    for (auto& th : pool) th.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double rate = static_cast<double>(flops.load()) / dt / 1e9;
    if (cpu_time) {
      rate = 0;
      for (double r : cpu_rates) rate += r;
    }
    best = std::max(best, rate);
  }
  return best;
}

}  // namespace

double measure_fp32_peak_gflops(int threads, double seconds, bool cpu_time) {
  return measure(kernels::fma_throughput_loop(best_isa()), threads, seconds, cpu_time);
}

double measure_vdpbf16ps_peak_gflops(int threads, double seconds, bool cpu_time) {
  const ThroughputLoop loop = kernels::vdpbf16ps_throughput_loop();
  return loop ? measure(loop, threads, seconds, cpu_time) : 0;
}

const char* bf16_products() {
  return kernels::kernel_bf16_dot() ? "VDPBF16PS" : "FMA on widened values";
}

double measure_bf16_peak_gflops(int threads, double seconds, bool cpu_time) {
  if (!has_avx512_bf16()) return 0;
  if (!kernels::kernel_bf16_dot()) return measure_fp32_peak_gflops(threads, seconds, cpu_time);
  return measure_vdpbf16ps_peak_gflops(threads, seconds, cpu_time);
}

double measure_peak_gflops(bool bf16, int threads, double seconds, bool cpu_time) {
  const double bf16_peak = bf16 ? measure_bf16_peak_gflops(threads, seconds, cpu_time) : 0;
  return bf16_peak > 0 ? bf16_peak : measure_fp32_peak_gflops(threads, seconds, cpu_time);
}

}  // namespace octodiff::bench
