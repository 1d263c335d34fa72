// For tests of what follows kernels::kernel_bf16_dot() (a bf16 model's TAESD and VAE precision):
// VDPBF16PS on for the scope, whatever this core's tuning chose. The CPU must have AVX-512 BF16.
#pragma once

#include "core/cpu.h"
#include "kernels/isa.h"
#include "kernels/tuning.h"

namespace octodiff::test {

inline kernels::KernelTuning tuning_with_vdpbf16ps() {
  kernels::KernelTuning t = kernels::kernel_tuning();
  t.bf16_dot = 1;
  return t;
}

class ScopedVdpbf16ps {
 public:
  ScopedVdpbf16ps() : tuning_(tuning_with_vdpbf16ps()), isa_(Isa::Avx512, /*bf16_dot=*/true) {}

 private:
  kernels::ScopedKernelTuning tuning_;
  kernels::ScopedKernelIsa isa_;
};

}  // namespace octodiff::test
