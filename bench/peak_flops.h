// The machine's fp32 FMA peak, measured rather than looked up: every thread runs independent
// fused multiply-adds on the widest vectors the CPU has for a fixed time.
#pragma once

namespace octodiff::bench {

// GFLOP/s over `threads` threads (1 FMA = 2 FLOPs). cpu_time: against each thread's CPU time
// (what a core gives while the thread has it, on a shared machine) instead of wall time.
double measure_fp32_peak_gflops(int threads, double seconds = 0.5, bool cpu_time = false);
// GFLOP/s of bf16 products the way the kernels compute them on this CPU: AVX-512 BF16 dot
// products (VDPBF16PS: 2 products + 2 adds per fp32 lane) where kernels::kernel_bf16_dot(),
// else FMA on widened values (the fp32 FMA rate: where VDPBF16PS issues at half of it, e.g.
// Intel Emerald Rapids); 0 when the CPU has no AVX-512 BF16.
double measure_bf16_peak_gflops(int threads, double seconds = 0.5, bool cpu_time = false);
// VDPBF16PS alone, whether the kernels use it or not (0 without AVX-512 BF16).
double measure_vdpbf16ps_peak_gflops(int threads, double seconds = 0.5, bool cpu_time = false);
// What measure_bf16_peak_gflops measured for this CPU: "VDPBF16PS" or "FMA on widened values".
const char* bf16_products();
// The peak a computation is a fraction of: measure_bf16_peak_gflops for bf16 where the CPU has
// AVX-512 BF16, else measure_fp32_peak_gflops.
double measure_peak_gflops(bool bf16, int threads, double seconds = 0.5, bool cpu_time = false);

}  // namespace octodiff::bench
