// What every octodiff-kernel-bench result needs beside its timings: the peak its rates are a
// fraction of, and (in the JSON context, bench_main.cpp) the CPU and the kernel blocking in use.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>

#include "kernels/gemm.h"

namespace octodiff::bench {

// The fp32 (or, for BF16 when the CPU has AVX-512 BF16, the bf16) peak in GFLOP/s, measured once
// on current_device().threads threads (peak_flops.h), against CPU time under
// OCTODIFF_BENCH_CPU_TIME. of_peak is a rate counter: the console shows it as "0.87/s".
double peak_gflops(kernels::Precision precision);

// "FLOPS" (rate of flops_per_iter) and "of_peak" (that rate over peak_gflops(precision)), with the
// benchmark's own clock: wall time, or the thread's CPU time under OCTODIFF_BENCH_CPU_TIME.
void set_flops(benchmark::State& state, double flops_per_iter, kernels::Precision precision);

// Whether OCTODIFF_BENCH_CPU_TIME is set: rates (and the peaks) against the benchmark thread's CPU
// time instead of wall time.
bool cpu_time_clock();
// Seconds on the benchmarks' clock: wall (steady), or the thread's CPU time (cpu_time_clock()).
double now_seconds();

// The benchmark's loop: `call` once untimed, then once per iteration, with the kernels' scratch
// from a caching arena as in a network's calls (bench_main.cpp); then set_flops. Two opt-in
// modes for machines whose speed changes from second to second (a shared VM: one Emerald Rapids
// VM core gave 87 or 170 GFLOP/s of FMAs from one run to the next), where separate runs compare
// different machines:
// - OCTODIFF_BENCH_VERSUS="key=value,…": each iteration also runs `call` under that tuning (the
//   tuning in use with these overrides), the benchmark's clock paused, the two in alternating
//   order; "versus_speedup" is the median over the iterations of (time in use / time with
//   VERSUS), "versus_pairs" their number (tune_kernels.sh --paired).
// - OCTODIFF_BENCH_ADJACENT_PEAK=1: a 10 ms peak probe (fp32, or the bf16 products' for BF16) runs
//   between iterations, clock paused; "of_adjacent_peak" is the median over the iterations of the
//   call's rate over the mean of the probes just before and after it.
// Times are the benchmark's clock: wall, or the thread's CPU time under OCTODIFF_BENCH_CPU_TIME.
void iterate(benchmark::State& state, double flops_per_iter, kernels::Precision precision,
             const std::function<void()>& call);

}  // namespace octodiff::bench
