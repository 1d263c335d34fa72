// Internals shared by the kernel implementations (not for models): the micro-kernel and
// vector-math tables per ISA, and the blocked GEMM driver that GEMM, conv and attention share.
#pragma once

#include <cstdint>

#include "core/cpu.h"
#include "kernels/gemm.h"

namespace octodiff::kernels {

// Zeroed packed storage for a K × N matrix in the panel layout below.
PackedMatrix allocate_packed(int64_t K, int64_t N);

namespace detail {

// Packed B layout, the same for every ISA (so packing never depends on the ISA in use):
// panels of kPanel columns; panel p holds rows k = 0..K-1 of columns [32p, 32p+32) at
// data[p·K·32 + k·32 + j], zero beyond N. Each panel row is two aligned cache lines.
constexpr int kPanel = 32;

// C[rows × cols] = (load ? C : 0) + A[rows × kc] · P[kc × cols], where P is a panel slice
// (row stride kPanel) and A is row-major with stride lda. rows ≤ mr of the kernel, cols ≤ 32.
// Every element is accumulated in k order with the same operations whatever rows/cols are,
// so results never depend on how the output was tiled.
using MicroKernelFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                               int64_t ldc, int rows, int cols, bool load);
struct MicroKernel {
  int mr = 0;
  MicroKernelFn fn = nullptr;
};
MicroKernel micro_kernel(Isa isa);
MicroKernel micro_kernel_generic();
MicroKernel micro_kernel_avx2();
MicroKernel micro_kernel_avx512();

// Element-wise maps and the online-softmax row update, per ISA. All accept y == x.
struct VecMath {
  void (*silu)(const float* x, int64_t n, float* y) = nullptr;
  void (*gelu_tanh)(const float* x, int64_t n, float* y) = nullptr;
  void (*quick_gelu)(const float* x, int64_t n, float* y) = nullptr;
  // One step of the flash-attention softmax for a score row s[0..n) (n ≥ 1): s ← scale·s,
  // m' = max(m, max s), s ← exp(s − m'), l ← l·exp(m − m') + Σ s, m ← m'. Returns exp(m − m')
  // (0 when m was −∞), the factor the output row must be rescaled by.
  float (*softmax_update)(float* s, int n, float scale, float* m, float* l) = nullptr;
  void (*gelu_erf)(const float* x, int64_t n, float* y) = nullptr;  // x·Φ(x)
};
const VecMath& vec_math(Isa isa);
const VecMath& vec_math_generic();
const VecMath& vec_math_avx2();
const VecMath& vec_math_avx512();

// Where the GEMM driver reads A from: a block of rows [i0, i0+mc) × columns [k0, k0+kc).
// Either a view into the caller's matrix, or a gather into `scratch` (≥ mc·scratch_lda(kc)
// floats).
class ASource {
 public:
  virtual ~ASource() = default;
  virtual const float* rows(int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* scratch,
                            int64_t* lda) const = 0;
  virtual bool needs_scratch() const = 0;
};

// Row stride of a gathered A block: kc rounded to whole cache lines plus one, so that the
// micro-kernel's 14 row streams never fall into the same L1 set (a stride that is a multiple of
// 4 KiB would put them all in one 8-way set).
inline int64_t scratch_lda(int64_t kc) { return (kc + 15) / 16 * 16 + 16; }

// A row-major matrix in the caller's memory. Read in place when its row stride spreads the
// micro-kernel's row streams over at least 16 L1 sets; otherwise copied block by block into a
// buffer with scratch_lda().
class DirectA final : public ASource {
 public:
  DirectA(const float* a, int64_t lda);
  const float* rows(int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* scratch,
                    int64_t* lda) const override;
  bool needs_scratch() const override { return copy_; }

 private:
  const float* a_;
  int64_t lda_;
  bool copy_;
};

// C[M × N] = A · B (+ epilogue), threads over output tiles, K in fixed chunks.
void run_gemm(const ASource& a, int64_t M, const PackedMatrix& b, float* c, int64_t ldc,
              const Epilogue& ep);

// Single-threaded C[M × N] (=|+=) A[M × K] · B for a panel slice: panel p starts at
// b + p·panel_stride, rows of a panel are kPanel floats apart. Used inside attention.
void block_gemm(const MicroKernel& mk, const float* a, int64_t lda, int64_t M, int64_t K,
                const float* b, int64_t panel_stride, int64_t N, float* c, int64_t ldc, bool load);

}  // namespace detail
}  // namespace octodiff::kernels
