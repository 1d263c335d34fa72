#include "kernels/isa.h"

#include <algorithm>
#include <atomic>

namespace octodiff::kernels {
namespace {

std::atomic<int> g_override{-1};  // -1: no override

}  // namespace

Isa kernel_isa() {
  const int best = static_cast<int>(best_isa());
  const int o = g_override.load(std::memory_order_relaxed);
  return static_cast<Isa>(o < 0 ? best : std::min(o, best));
}

ScopedKernelIsa::ScopedKernelIsa(Isa isa) : previous_(g_override.load()) {
  g_override.store(static_cast<int>(isa));
}

ScopedKernelIsa::~ScopedKernelIsa() { g_override.store(previous_); }

}  // namespace octodiff::kernels
