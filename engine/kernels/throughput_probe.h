// How fast this core issues the multiply-add instructions the kernels choose between, measured
// rather than looked up: independent chains of the widest FMA, and of AVX-512 BF16's VDPBF16PS.
// kernel_tuning() asks once, at start-up, for the CPUs no measured entry of choose_kernel_tuning
// settles (is VDPBF16PS worth it here?); the benchmarks' peak probes (bench/peak_flops.h) run the
// same loops on every thread, for longer.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace octodiff::kernels {

// `iterations` rounds of independent multiply-add chains on the calling thread; returns the FLOPs
// done (FMA: 2 a lane; VDPBF16PS: 2 products and 2 sums a lane) and leaves a value that depends on
// every chain in *sink.
using ThroughputLoop = int64_t (*)(int64_t iterations, float* sink);

// The widest FMA of `isa` (scalar multiply-adds for Isa::Generic).
ThroughputLoop fma_throughput_loop(Isa isa);
// VDPBF16PS on 512-bit vectors; nullptr where the CPU has no AVX-512 BF16.
ThroughputLoop vdpbf16ps_throughput_loop();

// VDPBF16PS's FLOP rate over the 512-bit FMA's, on the calling thread: short runs of each in turn
// after a warm-up (the core's 512-bit units powered up), the fastest of each counted; about 2 ms.
// 0 without AVX-512 BF16. About 2 where VDPBF16PS issues as often as an FMA (Zen 4), about 0.5
// where it issues a quarter as often (Intel Emerald Rapids: 0.47–0.50 measured).
double measure_vdpbf16ps_over_fma();

}  // namespace octodiff::kernels
