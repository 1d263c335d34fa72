// What every octodiff-kernel-bench result needs beside its timings: the peak its rates are a
// fraction of, and (in the JSON context, bench_main.cpp) the CPU and the kernel blocking in use.
#pragma once

#include <benchmark/benchmark.h>

#include "kernels/gemm.h"

namespace octodiff::bench {

// The fp32 (or, for BF16 when the CPU has AVX-512 BF16, the bf16) peak in GFLOP/s, measured once
// on current_device().threads threads (peak_flops.h), against CPU time under
// OCTODIFF_BENCH_CPU_TIME. of_peak is a rate counter: the console shows it as "0.87/s".
double peak_gflops(kernels::Precision precision);

// "FLOPS" (rate of flops_per_iter) and "of_peak" (that rate over peak_gflops(precision)), with the
// benchmark's own clock: wall time, or the thread's CPU time under OCTODIFF_BENCH_CPU_TIME.
void set_flops(benchmark::State& state, double flops_per_iter, kernels::Precision precision);

}  // namespace octodiff::bench
