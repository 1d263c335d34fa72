// Which SIMD family the kernels use. Normally core's best_isa(); tests lower it in-process to
// exercise the AVX2 and generic paths of the same binary (never above what the CPU runs).
#pragma once

#include "core/cpu.h"

namespace octodiff::kernels {

// The ISA the kernels dispatch on for the calling process right now.
Isa kernel_isa();

// Whether bf16 products use AVX-512 BF16's VDPBF16PS (the ISA is AVX-512, the CPU has it, no
// ScopedKernelIsa turned it off and the core's tuning says it pays: kernel_tuning().bf16_dot);
// otherwise they widen bf16 to float32 and use FMA, with the same results.
bool kernel_bf16_dot();

// Whether the AVX-512 BF16 instructions may be used at all (the ISA is AVX-512, the CPU has them,
// no ScopedKernelIsa turned them off), whatever the tuning says of VDPBF16PS's rate: a core
// that multiplies on widened values still rounds with VCVTNEPS2BF16.
bool kernel_bf16_instructions();

// Test/benchmark hook: makes the kernels use `isa` (clamped to best_isa()) until destroyed;
// bf16_dot = false also keeps AVX-512 kernels off the BF16 instructions (a CPU without them).
// Process-wide, not thread-local: do not use while other threads run kernels.
class ScopedKernelIsa {
 public:
  explicit ScopedKernelIsa(Isa isa, bool bf16_dot = true);
  ~ScopedKernelIsa();
  ScopedKernelIsa(const ScopedKernelIsa&) = delete;
  ScopedKernelIsa& operator=(const ScopedKernelIsa&) = delete;

 private:
  int previous_;
  bool previous_bf16_dot_;
};

}  // namespace octodiff::kernels
