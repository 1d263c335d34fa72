#include "kernels/isa.h"

#include <algorithm>
#include <atomic>

#include "kernels/tuning.h"

namespace octodiff::kernels {
namespace {

std::atomic<int> g_override{-1};  // -1: no override
std::atomic<bool> g_bf16_dot{true};

}  // namespace

Isa kernel_isa() {
  const int best = static_cast<int>(best_isa());
  const int o = g_override.load(std::memory_order_relaxed);
  return static_cast<Isa>(o < 0 ? best : std::min(o, best));
}

bool kernel_bf16_instructions() {
  return kernel_isa() == Isa::Avx512 && has_avx512_bf16() && g_bf16_dot.load(std::memory_order_relaxed);
}

bool kernel_bf16_dot() {
  return kernel_bf16_instructions() && kernel_tuning().bf16_dot != 0;
}

ScopedKernelIsa::ScopedKernelIsa(Isa isa, bool bf16_dot)
    : previous_(g_override.load()), previous_bf16_dot_(g_bf16_dot.load()) {
  g_override.store(static_cast<int>(isa));
  g_bf16_dot.store(bf16_dot);
}

ScopedKernelIsa::~ScopedKernelIsa() {
  g_override.store(previous_);
  g_bf16_dot.store(previous_bf16_dot_);
}

}  // namespace octodiff::kernels
