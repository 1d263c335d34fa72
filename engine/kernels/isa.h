// Which SIMD family the kernels use. Normally core's best_isa(); tests lower it in-process to
// exercise the AVX2 and generic paths of the same binary (never above what the CPU runs).
#pragma once

#include "core/cpu.h"

namespace octodiff::kernels {

// The ISA the kernels dispatch on for the calling process right now.
Isa kernel_isa();

// Test/benchmark hook: makes the kernels use `isa` (clamped to best_isa()) until destroyed.
// Process-wide, not thread-local: do not use while other threads run kernels.
class ScopedKernelIsa {
 public:
  explicit ScopedKernelIsa(Isa isa);
  ~ScopedKernelIsa();
  ScopedKernelIsa(const ScopedKernelIsa&) = delete;
  ScopedKernelIsa& operator=(const ScopedKernelIsa&) = delete;

 private:
  int previous_;
};

}  // namespace octodiff::kernels
