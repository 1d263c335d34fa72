// CPU features, detected once at start-up, for runtime dispatch of SIMD kernels.
#pragma once

#include <string>

namespace octodiff {

enum class Isa { Generic, Avx2, Avx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false;
};

const CpuFeatures& cpu_features();

// Best kernel family this CPU runs. OCTODIFF_ISA=generic|avx2|avx512 lowers it (for tests and
// benchmarks of the fallback paths); it is never raised above what the CPU supports.
Isa best_isa();
bool has_avx512_bf16();
std::string isa_name(Isa isa);

}  // namespace octodiff
