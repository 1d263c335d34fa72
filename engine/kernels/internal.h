// Internals shared by the kernel implementations (not for models): the micro-kernel and
// vector-math tables per ISA, and the blocked GEMM driver that GEMM, conv and attention share.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "core/cpu.h"
#include "core/memory.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"
#include "kernels/tuning.h"

namespace octodiff::kernels {

// Zeroed packed storage for a K × N matrix in the panel layout below (per precision); a weight's
// storage comes from the thread's weight store (core/memory.h), scratch packing from the heap.
PackedMatrix allocate_packed(int64_t K, int64_t N, Precision precision = Precision::F32, bool weight = false);

namespace detail {

// Packed B layout, the same for every ISA (so packing never depends on the ISA in use):
// panels of kPanel columns; panel p holds rows k = 0..K-1 of columns [32p, 32p+32) at
// data[p·K·32 + k·32 + j], zero beyond N. Each panel row is two aligned cache lines.
constexpr int kPanel = 32;

// The bf16 layout interleaves pairs of K, as VDPBF16PS multiplies them: panel p holds
// pair-rows q = 0..⌈K/2⌉-1, each kPanel columns × 2, element (k, n = 32p + j) at
// bf16_data[p·⌈K/2⌉·64 + (k/2)·64 + 2j + k%2]; zero beyond N and at k = K for odd K. A pair-row
// is two aligned cache lines, like an f32 panel row.
constexpr int kPairRow = 2 * kPanel;
// Packing transposes in blocks of this many rows of a panel (64 × 32 floats: 8 KiB), so that the
// block being written stays in L1 while the source rows are read along K.
constexpr int64_t kPackRows = 64;
inline int64_t bf16_pairs(int64_t K) {
  return (K + 1) / 2;
}
// A transposed B (N × K, a torch weight) one panel at a time: rows(n0, w, scratch) returns W's
// rows n0 … n0 + w − 1 with stride K — the weight itself, or `scratch` (room for kPanel × K
// floats) when they must be reordered first (a conv weight: see pack_conv2d).
using PanelRows = std::function<const float*(int64_t n0, int64_t w, float* scratch)>;
// pack_b for a transposed B given panel by panel.
PackedMatrix pack_b_panels(int64_t K, int64_t N, const PanelRows& rows, Precision precision);
// A transposed B read where it lies: element (k, n) at w[n·row_stride + (k mod groups)·taps +
// k div groups] — a torch weight (taps = 1, groups = K), or a conv weight [co][ci][tap] read
// tap-major (groups = Ci, taps = kh·kw, row_stride = Ci·taps).
struct StridedRows {
  const float* w = nullptr;
  int64_t row_stride = 0, groups = 0, taps = 1;
};
PackedMatrix pack_b_strided(int64_t K, int64_t N, const StridedRows& b, Precision precision);
// One panel (rows n0 … n0+w−1, w ≤ kPanel) into its zeroed place in the layout above, on AVX-512,
// for a B that panel_avx512_reads: a torch weight, or a conv weight with groups in multiples of
// 16 and at most 16 taps.
bool panel_avx512_reads(const StridedRows& b);
void pack_f32_panel_avx512(const StridedRows& b, int64_t n0, int64_t w, int64_t K, float* panel);
void pack_bf16_panel_avx512(const StridedRows& b, int64_t n0, int64_t w, int64_t K, uint16_t* panel);
// Packs a K × N row-major b, or a transposed B panel by panel, into the bf16 layout at dst
// (zeroed, allocate_packed's size).
void pack_bf16(const float* b, int64_t K, int64_t N, uint16_t* dst);
void pack_bf16_panels(int64_t K, int64_t N, const PanelRows& rows, uint16_t* dst);

// C[rows × cols] = (load ? C : 0) + A[rows × kc] · P[kc × cols], where P is a panel slice
// (row stride kPanel) and A is row-major with stride lda. rows ≤ mr of the kernel, cols ≤ 32.
// Every element is accumulated in k order with the same operations whatever rows/cols are,
// so results never depend on how the output was tiled.
using MicroKernelFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                               int64_t ldc, int rows, int cols, bool load);
// The same, and for every k the two cache lines at prefetch + k·kPanel (another panel slice, or
// this one further on) are prefetched into L1: a B streaming from memory arrives before the
// micro-rows need it. Same arithmetic as fn, so the same bits.
using MicroKernelPrefetchFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                                       int64_t ldc, int rows, int cols, bool load, const float* prefetch);
// How far ahead of its loads a prefetching micro-kernel fetches its B slice, in k rows (3 KiB:
// 16…96 measured alike on Emerald Rapids); past a slice's end it fetches the next bytes of the
// packed layout (the next K chunk's or panel's).
constexpr int64_t kPrefetchAhead = 24;
// The same, and `lines` (≤ kc) consecutive cache lines from prefetch are fetched into L2, spread
// evenly over the k loop: the micro-rows of one panel slice share the fetching of the next.
using MicroKernelStreamFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                                     int64_t ldc, int rows, int cols, bool load, const float* prefetch,
                                     int64_t lines);
struct MicroKernel {
  int mr = 0;
  MicroKernelFn fn = nullptr;
  MicroKernelPrefetchFn fn_prefetch = nullptr;  // null: this ISA's kernel has no prefetching variant
  MicroKernelStreamFn fn_stream = nullptr;
};
MicroKernel micro_kernel(Isa isa);
MicroKernel micro_kernel_generic();
MicroKernel micro_kernel_avx2();
MicroKernel micro_kernel_avx512();

// The bf16 micro-kernels: C[rows × cols] = (load ? C : 0) + A · P over `pairs` pairs of K, where
// A is bf16 row-major (row stride lda elements, even; rows zero-padded to 2·pairs) and P a bf16
// panel slice (pair-rows kPairRow apart). Each pair adds (a₁·b₁) then (a₀·b₀) to the float32
// accumulator, each sum rounded: the order VDPBF16PS documents, and since a product of two
// bf16 values is exact in float32, the fallbacks that widen to float32 give the same bits
// (except for subnormal inputs and results, which VDPBF16PS flushes to zero).
// `ep` is added to the finished sums as they are stored: c = (Σ + bias[j]) + residual[i][j], each
// sum rounded, as apply_epilogue does (the drivers pass it with the last K chunk only).
struct TileEpilogue {
  const float* bias = nullptr;      // at the tile's first column
  const float* residual = nullptr;  // at the tile's first element
  int64_t ldr = 0;
};
using MicroKernelBf16Fn = void (*)(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c,
                                   int64_t ldc, int rows, int cols, bool load, const TileEpilogue& ep);
// The same product with A already widened to float32 (each bf16 value as the float it is, row
// stride lda floats, rows zero-padded to 2·pairs): a kernel that multiplies with FMA takes its A
// values by broadcast loads instead of splitting every pair for every row and panel.
using MicroKernelBf16WideFn = void (*)(int64_t pairs, const float* a, int64_t lda, const uint16_t* b, float* c,
                                       int64_t ldc, int rows, int cols, bool load, const TileEpilogue& ep);
// Widens rows × n bf16 values (row stride lda) to float32 (row stride lda).
using WidenBf16Fn = void (*)(const uint16_t* a, int64_t lda, int64_t rows, int64_t n, float* out);
// Either fn, or wide with widen: the drivers widen an A block once and reuse it for every panel.
struct MicroKernelBf16 {
  int mr = 0;
  MicroKernelBf16Fn fn = nullptr;
  MicroKernelBf16WideFn wide = nullptr;
  WidenBf16Fn widen = nullptr;
};
// VDPBF16PS when the ISA is AVX-512 and kernel_bf16_dot() allows it, else the ISA's fallback.
MicroKernelBf16 micro_kernel_bf16(Isa isa);
MicroKernelBf16 micro_kernel_bf16_generic();
MicroKernelBf16 micro_kernel_bf16_avx2();
MicroKernelBf16 micro_kernel_bf16_avx512();      // FMA on widened values (no BF16, or VDPBF16PS slow)
MicroKernelBf16 micro_kernel_bf16_avx512_dot();  // VDPBF16PS

// float32 → bf16, round to nearest even (core/half.h's f32_to_bf16, bit for bit), per ISA.
// With dot (kernel_bf16_instructions(): the CPU has AVX-512 BF16) it is VCVTNEPS2BF16, which
// also flushes subnormal inputs to zero: VDPBF16PS reads subnormal bf16 inputs as zero anyway, so
// its products are unchanged, and the widened products of a core that multiplies with FMA are
// then the same bits as VDPBF16PS's. Packed weights always keep subnormals (dot = false): the
// weight cache does not depend on the CPU.
using ToBf16Fn = void (*)(const float* x, int64_t n, uint16_t* y);
ToBf16Fn to_bf16_fn(Isa isa, bool dot);
void to_bf16_generic(const float* x, int64_t n, uint16_t* y);
void to_bf16_avx2(const float* x, int64_t n, uint16_t* y);
void to_bf16_avx512(const float* x, int64_t n, uint16_t* y);
void to_bf16_avx512_dot(const float* x, int64_t n, uint16_t* y);
// The low half of a Split activation (gemm.h): round(x − round(x)) with the same ISA's rounding
// (0 where round(x) is not finite).
ToBf16Fn to_bf16_low_fn(Isa isa, bool dot);
// VecMath::softmax_update_bf16 rounding with VCVTNEPS2BF16 (for the VDPBF16PS path).
float softmax_update_bf16_avx512_dot(float* s, int n, float scale, float* m, float* l, uint16_t* p);

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
  // softmax_update, except that the probabilities go to p[0..n) as bf16 (round to nearest even)
  // and s is left as scratch. l sums the float32 probabilities.
  float (*softmax_update_bf16)(float* s, int n, float scale, float* m, float* l, uint16_t* p) = nullptr;
  // softmax_update for a key tile held in columns: s is nk rows (keys) × n ≤ kPanel columns
  // (queries), row stride kPanel, and each column is one query's score row. Per column c: m' =
  // max(m[c], max_j scale·s[j][c]), s[j][c] ← exp(scale·s[j][c] − m'), l[c] ← l[c]·alpha[c] + Σ_j,
  // alpha[c] = exp(m[c] − m') (0 when m[c] was −∞), m[c] ← m'. With `valid`, rows j ≥ valid[c]
  // are masked out of column c (set to 0): a causal tile. Null where the ISA has none (attention
  // then works on score rows).
  void (*softmax_columns)(float* s, int nk, int n, float scale, float* m, float* l, float* alpha,
                          const int32_t* valid) = nullptr;
};
// The factor softmax_update returns: exp(m − m_new), or exp2 for a maximum kept in base 2 (the
// VDPBF16PS path); 0 when m is −∞ (the row's first block), and exactly 1 without a libm call
// when the maximum did not grow — the usual case after a row's first key tiles.
inline float softmax_rescale(float m, float m_new, bool base2 = false) {
  if (m == -std::numeric_limits<float>::infinity()) return 0.0f;
  if (m == m_new) return 1.0f;
  return base2 ? std::exp2(m - m_new) : std::exp(m - m_new);
}

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
  // Whether rows() is cheap enough to call again for every few panels (a copy, not an im2col
  // gather): lets the driver keep B in cache instead (run_gemm's streaming-B tiles).
  virtual bool cheap_rows() const { return true; }
  // The same block rounded to bf16 into dst (row stride ld, even), each row zero-padded to an
  // even length.
  virtual void rows_bf16(int64_t i0, int64_t mc, int64_t k0, int64_t kc, ToBf16Fn convert, uint16_t* dst,
                         int64_t ld) const = 0;
  // Hint: rows [i0, i1) × columns [k0, k0+kc) will be read soon (fetched into L2 meanwhile).
  virtual void prefetch(int64_t i0, int64_t i1, int64_t k0, int64_t kc) const {
    (void)i0, (void)i1, (void)k0, (void)kc;
  }
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
  void rows_bf16(int64_t i0, int64_t mc, int64_t k0, int64_t kc, ToBf16Fn convert, uint16_t* dst,
                 int64_t ld) const override;
  void prefetch(int64_t i0, int64_t i1, int64_t k0, int64_t kc) const override;

 private:
  const float* a_;
  int64_t lda_;
  bool copy_;
};

// Row stride (bf16 elements) of a bf16 A block: whole cache lines plus one, as scratch_lda.
inline int64_t scratch_lda_bf16(int64_t kc) {
  return (kc + 31) / 32 * 32 + 32;
}
// Row stride of the bf16 GEMM driver's A blocks, the same for every K: 25 cache lines (an odd
// number, so that the rows of a micro-tile fall in different L1 sets), room for kc ≤ 768.
constexpr int64_t kBlockLdaBf16 = 800;

// How run_gemm splits C into tiles for threads: row blocks of mc rows (whole micro-rows, as
// equal as they allow) × column blocks of tile_panels panels.
struct GemmTiling {
  int64_t mc = 0, m_blocks = 0, panels = 0, n_blocks = 0, tile_panels = 0;
};
GemmTiling gemm_tiling(int64_t M, int64_t N, int mr);

// C[M × N] = A · B (+ epilogue), threads over output tiles, K in fixed chunks; at B's precision.
void run_gemm(const ASource& a, int64_t M, const PackedMatrix& b, float* c, int64_t ldc,
              const Epilogue& ep);
void run_gemm_bf16(const ASource& a, int64_t M, const PackedMatrix& b, float* c, int64_t ldc,
                   const Epilogue& ep);
void apply_epilogue(float* c, int64_t ldc, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                    const Epilogue& ep);

// How the GEMM drivers cut K (never depending on threads or tiles, so neither changes a bit of
// the result): equal chunks of at most kernel_tuning().gemm_kc (f32; 384 on Zen 4) or bf16_kc
// (bf16, whole pairs; 768 on Zen 4).
int64_t chunk_size_f32(int64_t K);
int64_t chunk_size_bf16(int64_t K);

// Single-threaded C[M × N] (=|+=) A[M × K] · B for a panel slice: panel p starts at
// b + p·panel_stride, rows of a panel are kPanel floats apart. Used inside attention and Winograd;
// prefetches B as run_gemm does (kernel_tuning().gemm_prefetch_b).
void block_gemm(const MicroKernel& mk, const float* a, int64_t lda, int64_t M, int64_t K,
                const float* b, int64_t panel_stride, int64_t N, float* c, int64_t ldc, bool load);
// The same in bf16: A is bf16 (pairs pairs per row, stride lda), b a bf16 panel slice with
// panels panel_stride elements apart.
void block_gemm_bf16(const MicroKernelBf16& mk, const uint16_t* a, int64_t lda, int64_t M, int64_t pairs,
                     const uint16_t* b, int64_t panel_stride, int64_t N, float* c, int64_t ldc, bool load);

// VecMath::softmax_columns with the VDPBF16PS path's base-2 exp (for probabilities rounded to
// bf16; m is kept in units of log2 e, alpha and l mean what they mean there).
void softmax_columns_base2_avx512(float* s, int nk, int n, float scale, float* m, float* l, float* alpha,
                                  const int32_t* valid);

// Probabilities of a score-column tile (nk rows × kPanel, float32, row stride kPanel) as a bf16
// pair panel for P·V: pair-row r holds rows 2r and 2r + 1 of each column side by side, rounded by
// VCVTNEPS2BF16 (AVX-512 BF16 only); a missing last odd row is zero.
void pack_probability_pairs_avx512(const float* s, int nk, uint16_t* p);

// Whether attention of this shape holds its scores in columns (attention_columns.h): the tuning
// allows it, the ISA has VecMath::softmax_columns, and the shape is one where it pays (float32;
// bf16 too where its products are widened and the CPU has the BF16 instructions).
bool attention_by_columns_chosen(const AttentionShape& s);

// bf16 attention (attention.h with Precision::BF16): Q·Kᵀ and P·V on the bf16 micro-kernels,
// the online softmax in float32.
void attention_bf16(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                    float scale, bool causal);

// Winograd F(2×2, 3×3), F(4×4, 3×3) and the upsampling F(3×3, 2×2) (conv2d_winograd.cpp).
// winograd_positions: α², the transformed tile's positions (16 or 36). winograd_weight_rows: rows
// q0 … q0 + n − 1 of the OIHW 3×3 weight (Co outputs) transformed (G g Gᵀ) as pack_b's transposed
// input, α²·Ci floats each (position-major), into dst — one panel at a time, for pack_b_panels;
// conv2d_winograd: the stride-1, padding-1 convolution (of the upsampled x for
// WinogradUpsample2x) with a weight packed from them.
int winograd_positions(ConvAlgorithm algorithm);
void winograd_weight_rows(ConvAlgorithm algorithm, const float* w, int64_t Ci, int64_t Co, int64_t q0,
                          int64_t n, float* dst);
void conv2d_winograd(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w, float* y,
                     const float* residual, bool relu);
// F(2×2, 3×3)'s input transform Bᵀ d B of one tile (the upsampling F(3×3, 2×2)'s too: the same
// points) for all Ci channels, rounded to bf16 exactly as to_bf16_fn(isa, dot) rounds, position
// p's Ci values at v + p·vs; the patch's element (i, j) at d + i·row + j·col. nullptr for an ISA
// without one (the transform then goes through float32 rows and to_bf16_fn).
using WinogradInputBf16Fn = void (*)(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                     int64_t vs);
WinogradInputBf16Fn winograd_input_bf16_fn(Isa isa, bool dot);
// Whether a Winograd convolution writes its output (`bytes` long at y) with non-temporal stores:
// more than kernel_tuning().winograd_stream_kib, and y 64-byte aligned (tensors are).
bool winograd_streams_output(int64_t bytes, const float* y);
void winograd_input_bf16_avx512(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                int64_t vs);
void winograd_input_bf16_avx512_dot(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                    int64_t vs);

// A convolution with at most kFewOutputChannels output channels and input channels in whole
// 16-lane vectors, with a Direct weight (any kernel size, stride and padding): one dot product per
// output pixel and channel over (tap, input channel), 16 lanes wide, the lanes summed in a fixed
// order, so every ISA gives the same bits (conv2d_few_outputs.cpp; not for Split activations).
// Ho × Wo: conv2d_out_size's output.
constexpr int64_t kFewOutputChannels = 8;
struct FewOutputsRow;
bool conv2d_few_outputs_applies(const Conv2dWeights& w);
void conv2d_few_outputs(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w,
                        const Conv2dGeometry& g, int64_t Ho, int64_t Wo, float* y, const float* residual,
                        bool relu);
void few_outputs_row_avx2(const FewOutputsRow& r, int out_channels);
void few_outputs_row_avx512(const FewOutputsRow& r, int out_channels);

// Scratch for the length of one kernel call, from the calling thread's allocator: in a compiled
// plan that is its arena, which keeps the block for the next call (no fresh pages) and gives it
// back when the plan trims between phases — unlike a per-thread buffer, which would hold the
// largest size ever used (the VAE's) for the life of the thread.
class CallScratch {
 public:
  explicit CallScratch(size_t bytes) : storage_(allocate_floats(static_cast<int64_t>((bytes + 3) / 4))) {}
  template <typename T>
  T* get() const {
    return static_cast<T*>(const_cast<void*>(storage_.get()));
  }

 private:
  std::shared_ptr<const void> storage_;
};

// A per-thread buffer kept between calls (allocating and zeroing big blocks per call costs as
// much as a small kernel); only ever grows. Declare one `thread_local` per use.
class ThreadBuffer {
 public:
  ThreadBuffer() = default;
  ~ThreadBuffer() { aligned_free(p_); }
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;
  template <typename T>
  T* get(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    if (bytes > bytes_) {
      aligned_free(p_);
      p_ = nullptr;
      bytes_ = 0;
      p_ = aligned_alloc_or_throw(bytes);
      bytes_ = bytes;
    }
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace detail
}  // namespace octodiff::kernels
