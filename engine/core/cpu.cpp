#include "core/cpu.h"

#include <cstdlib>
#include <cstring>

namespace octodiff {

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    // libgcc's checks include the OS (XCR0) support for the AVX/AVX-512 register state.
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = true;  // every AVX2 CPU has F16C; checked together with avx2 below
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
    return c;
  }();
  return f;
}

Isa best_isa() {
  static const Isa isa = [] {
    const CpuFeatures& c = cpu_features();
    Isa best = Isa::Generic;
    if (c.avx2 && c.fma) best = Isa::Avx2;
    if (best == Isa::Avx2 && c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq) best = Isa::Avx512;
    if (const char* v = std::getenv("OCTODIFF_ISA")) {
      Isa want = best;
      if (!std::strcmp(v, "generic")) want = Isa::Generic;
      if (!std::strcmp(v, "avx2")) want = Isa::Avx2;
      if (!std::strcmp(v, "avx512")) want = Isa::Avx512;
      if (static_cast<int>(want) < static_cast<int>(best)) best = want;
    }
    return best;
  }();
  return isa;
}

bool has_avx512_bf16() { return best_isa() == Isa::Avx512 && cpu_features().avx512bf16; }

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace octodiff
