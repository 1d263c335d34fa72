// GEMM driver: packed weights, fixed K chunks, output tiles spread over threads.
//
// Loop nest per output tile (MC rows × up to 32 panels of 32 columns):
//   for each K chunk (≤ kMaxKc, fixed by K alone)   — A block of MC × kc, gathered once, in L2
//     for each panel of the tile                    — B slice kc × 32 reused by MC/mr calls
//       for each group of mr rows: micro-kernel     — output tile prefetched, then written once
// Every output element is accumulated by one micro-kernel call per K chunk, chunks in order,
// so neither the tiling nor the thread count changes a single bit of the result.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "kernels/gemm.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {

using detail::kPackRows;
using detail::kPanel;

const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : "f32";
}

size_t packed_size(int64_t K, int64_t N, Precision precision) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  return precision == Precision::BF16
             ? static_cast<size_t>(panels * detail::bf16_pairs(K) * detail::kPairRow) * sizeof(uint16_t)
             : static_cast<size_t>(panels * K * kPanel) * sizeof(float);
}

std::string packed_tag(int64_t K, int64_t N, Precision precision) {
  return cat("packed ", K, "x", N, " ", precision_name(precision), " panel", kPanel);
}

PackedMatrix allocate_packed(int64_t K, int64_t N, Precision precision, bool weight) {
  if (K <= 0 || N <= 0) fail(cat("pack_b: empty matrix ", K, "x", N));
  PackedMatrix p;
  p.K_ = K;
  p.N_ = N;
  p.nr_ = kPanel;
  p.precision_ = precision;
  p.bytes_ = packed_size(K, N, precision);
  if (weight) {
    p.data_ = allocate_weight_bytes(p.bytes_, packed_tag(K, N, precision));
  } else {
    void* raw = aligned_alloc_or_throw(p.bytes_);
    std::memset(raw, 0, p.bytes_);
    p.data_ = std::shared_ptr<void>(raw, [](void* q) { aligned_free(q); });
  }
  return p;
}

PackedMatrix PackedMatrix::adopt(int64_t K, int64_t N, Precision precision, std::shared_ptr<void> data,
                                 size_t bytes) {
  if (K <= 0 || N <= 0) fail(cat("packed weight: empty matrix ", K, "x", N));
  const size_t expected = packed_size(K, N, precision);
  if (bytes != expected || !data)
    fail(cat("packed weight ", K, "x", N, " ", precision_name(precision), ": ", bytes, " bytes stored, ", expected,
             " expected"));
  if (reinterpret_cast<uintptr_t>(data.get()) % 64 != 0) fail("packed weight: storage is not 64-byte aligned");
  PackedMatrix p;
  p.K_ = K;
  p.N_ = N;
  p.nr_ = kPanel;
  p.precision_ = precision;
  p.bytes_ = bytes;
  p.data_ = std::move(data);
  return p;
}

namespace {

// Eight floats as one vector (GCC/clang vector extensions: one AVX register, or two SSE ones).
typedef float F8 __attribute__((vector_size(32), aligned(4)));

// r[i] = row i of an 8×8 block in, column i out: interleave pairs of rows, then pairs of pairs
// (within 128-bit halves), then swap halves.
inline void transpose8x8(F8 r[8]) {
  F8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {  // u[i + 2h + c] holds columns 2h + c and 2h + c + 4 of rows i … i+3
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + 2 + h], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + 2 + h], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = __builtin_shufflevector(u[c], u[4 + c], 0, 1, 2, 3, 8, 9, 10, 11);
    r[c + 4] = __builtin_shufflevector(u[c], u[4 + c], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

void pack_f32(const float* b, int64_t K, int64_t N, float* dst) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  parallel_for(panels, [&](int64_t p0, int64_t p1) {
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int64_t n0 = pi * kPanel, w = std::min<int64_t>(kPanel, N - n0);
      float* panel = dst + pi * K * kPanel;
      for (int64_t k = 0; k < K; ++k) std::memcpy(panel + k * kPanel, b + k * N + n0, w * sizeof(float));
    }
  });
}

// In blocks of kPackRows rows (a whole 1.5 MB panel per column would not stay in L1), by 8×8
// transposes in registers (3x faster than element by element); edges element by element. On
// AVX-512, by pack_f32_panel_avx512 instead.
void pack_f32_panels(int64_t K, int64_t N, const detail::PanelRows& rows, float* dst) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  const bool avx512 = kernel_isa() == Isa::Avx512;
  parallel_for(panels, [&](int64_t p0, int64_t p1) {
    thread_local detail::ThreadBuffer scratch;
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int64_t n0 = pi * kPanel, w = std::min<int64_t>(kPanel, N - n0), w8 = w / 8 * 8;
      const float* b = rows(n0, w, scratch.get<float>(kPanel * K));
      float* panel = dst + pi * K * kPanel;
      if (avx512) {
        detail::pack_f32_panel_avx512({b, K, K, 1}, 0, w, K, panel);
        continue;
      }
      for (int64_t k0 = 0; k0 < K; k0 += kPackRows) {
        const int64_t k1 = std::min(K, k0 + kPackRows), k8 = k0 + (k1 - k0) / 8 * 8;
        for (int64_t j0 = 0; j0 < w8; j0 += 8)
          for (int64_t k = k0; k < k8; k += 8) {
            F8 r[8];
            for (int i = 0; i < 8; ++i) std::memcpy(&r[i], b + (j0 + i) * K + k, sizeof(F8));
            transpose8x8(r);
            for (int i = 0; i < 8; ++i) std::memcpy(panel + (k + i) * kPanel + j0, &r[i], sizeof(F8));
          }
        for (int64_t j = 0; j < w; ++j) {
          const float* src = b + j * K;
          for (int64_t k = j < w8 ? k8 : k0; k < k1; ++k) panel[k * kPanel + j] = src[k];
        }
      }
    }
  });
}

}  // namespace

namespace detail {

PackedMatrix pack_b_panels(int64_t K, int64_t N, const PanelRows& rows, Precision precision) {
  PackedMatrix p = allocate_packed(K, N, precision, /*weight=*/true);
  if (precision == Precision::BF16)
    pack_bf16_panels(K, N, rows, p.mutable_bf16_data());
  else
    pack_f32_panels(K, N, rows, p.mutable_data());
  return p;
}

PackedMatrix pack_b_strided(int64_t K, int64_t N, const StridedRows& b, Precision precision) {
  if (b.row_stride != b.groups * b.taps || K != b.groups * b.taps)
    fail(cat("internal: pack_b_strided: ", K, " rows from ", b.groups, " groups of ", b.taps, " with stride ",
             b.row_stride));
  // On AVX-512, one panel at a time in registers (pack_avx512.cpp; 1.3–3× faster in
  // octodiff-kernel-bench's BM_PackWeight*): the row-wise packers reorder a conv weight through
  // a scratch bigger than L2 first.
  if (kernel_isa() == Isa::Avx512 && panel_avx512_reads(b)) {
    PackedMatrix p = allocate_packed(K, N, precision, /*weight=*/true);
    parallel_for((N + kPanel - 1) / kPanel, [&](int64_t p0, int64_t p1) {
      for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t n0 = pi * kPanel, w = std::min<int64_t>(kPanel, N - n0);
        if (precision == Precision::BF16)
          pack_bf16_panel_avx512(b, n0, w, K, p.mutable_bf16_data() + pi * bf16_pairs(K) * kPairRow);
        else
          pack_f32_panel_avx512(b, n0, w, K, p.mutable_data() + pi * K * kPanel);
      }
    });
    return p;
  }
  if (b.taps == 1)
    return pack_b_panels(
        K, N, [b](int64_t n0, int64_t, float*) { return b.w + n0 * b.row_stride; }, precision);
  // Each row reordered tap-major into the packer's scratch, one panel of rows at a time.
  return pack_b_panels(
      K, N,
      [b](int64_t n0, int64_t n, float* scratch) -> const float* {
        for (int64_t j = 0; j < n; ++j) {
          const float* src = b.w + (n0 + j) * b.row_stride;  // [group][tap]
          float* dst = scratch + j * b.row_stride;           // [tap][group]
          for (int64_t g = 0; g < b.groups; ++g)
            for (int64_t t = 0; t < b.taps; ++t) dst[t * b.groups + g] = src[g * b.taps + t];
        }
        return scratch;
      },
      precision);
}

}  // namespace detail

PackedMatrix pack_b(const float* b, int64_t K, int64_t N, bool transposed, Precision precision) {
  if (transposed) return detail::pack_b_strided(K, N, {b, K, K, 1}, precision);
  PackedMatrix p = allocate_packed(K, N, precision, /*weight=*/true);
  if (precision == Precision::BF16)
    detail::pack_bf16(b, K, N, p.mutable_bf16_data());
  else
    pack_f32(b, K, N, p.mutable_data());
  return p;
}

namespace detail {

DirectA::DirectA(const float* a, int64_t lda) : a_(a), lda_(lda) {
  // Rows r·lda floats apart start in L1 set (r·lda/16) mod 64: 64 / gcd(lda/16, 64) distinct
  // sets when lda is a multiple of 16 floats, all different when it is not.
  int64_t g = 64;
  if (lda % 16 == 0) g = std::gcd(lda / 16, int64_t{64});
  else g = 1;
  copy_ = g > 4;
}

const float* DirectA::rows(int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* scratch,
                           int64_t* lda) const {
  if (!copy_) {
    *lda = lda_;
    return a_ + i0 * lda_ + k0;
  }
  const int64_t ld = scratch_lda(kc);
  for (int64_t r = 0; r < mc; ++r) std::memcpy(scratch + r * ld, a_ + (i0 + r) * lda_ + k0, kc * sizeof(float));
  *lda = ld;
  return scratch;
}

void DirectA::rows_bf16(int64_t i0, int64_t mc, int64_t k0, int64_t kc, ToBf16Fn convert, uint16_t* dst,
                        int64_t ld) const {
  for (int64_t r = 0; r < mc; ++r) {
    convert(a_ + (i0 + r) * lda_ + k0, kc, dst + r * ld);
    if (kc % 2) dst[r * ld + kc] = 0;
  }
}

void DirectA::prefetch(int64_t i0, int64_t i1, int64_t k0, int64_t kc) const {
  for (int64_t r = i0; r < i1; ++r) {
    const char* row = reinterpret_cast<const char*>(a_ + r * lda_ + k0);
    for (int64_t off = 0; off < kc * static_cast<int64_t>(sizeof(float)); off += 64)
      __builtin_prefetch(row + off, 0, 2);
  }
}

MicroKernel micro_kernel(Isa isa) {
  switch (isa) {
    case Isa::Avx512: {
      // Any row count up to the kernel's 14 is a variant it has (kernel_tuning().avx512_mr).
      MicroKernel mk = micro_kernel_avx512();
      mk.mr = static_cast<int>(std::min<int64_t>(mk.mr, kernel_tuning().avx512_mr));
      return mk;
    }
    case Isa::Avx2: return micro_kernel_avx2();
    case Isa::Generic: break;
  }
  return micro_kernel_generic();
}

namespace {

// Per-thread A-block buffer, kept between calls (allocating and zeroing ~200 KiB per call
// costs as much as a small GEMM). Only ever grows.
float* thread_scratch(int64_t floats) {
  thread_local ThreadBuffer b;
  return b.get<float>(floats);
}

}  // namespace

// K chunk (kernel_tuning().gemm_kc, 384 on Zen 4): the B slice of a panel (kc × 32 floats,
// 48 KiB) and the A block (MC × kc, ≤ 170 KiB) sit in L1/L2; measured 256…512 within noise on
// Zen 4 (tuning.cpp derives it for other caches).
int64_t chunk_size_f32(int64_t K) {
  const int64_t max_kc = kernel_tuning().gemm_kc;
  const int64_t chunks = (K + max_kc - 1) / max_kc;
  return (K + chunks - 1) / chunks;
}

void apply_epilogue(float* c, int64_t ldc, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                    const Epilogue& ep) {
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + (i0 + r) * ldc + j0;
    if (ep.bias) {
      const float* bias = ep.bias + j0;
      for (int64_t j = 0; j < cols; ++j) cr[j] += bias[j];
    }
    if (ep.residual) {
      const float* res = ep.residual + (i0 + r) * ep.ldr + j0;
      for (int64_t j = 0; j < cols; ++j) cr[j] += res[j];
    }
  }
}

GemmTiling gemm_tiling(int64_t M, int64_t N, int mr) {
  GemmTiling t;
  const KernelTuning& tuning = kernel_tuning();
  // Row blocks of at most mc_max rows (8 micro-rows of ≥ 8 rows, 16 of fewer on Zen 4), as equal
  // as whole micro-rows allow (so a 128-row conv at 8×8 splits 70 + 58, not 112 + 16).
  const int64_t mc_max =
      static_cast<int64_t>(mr) * (mr >= 8 ? tuning.gemm_mc_micro_rows : tuning.gemm_mc_micro_rows_narrow);
  t.m_blocks = (M + mc_max - 1) / mc_max;
  t.mc = ((M + t.m_blocks - 1) / t.m_blocks + mr - 1) / mr * mr;
  t.panels = (N + kPanel - 1) / kPanel;
  // Column blocks of up to gemm_nc_panels panels (32: 1024 columns): an A block, gathered or
  // copied once, is reused across all of them (B slices stream from L2/L3 at a small fraction of
  // the compute time). Split further until there are enough tiles to keep every thread busy; the
  // tiling does not affect the result.
  t.n_blocks = (t.panels + tuning.gemm_nc_panels - 1) / tuning.gemm_nc_panels;
  while (t.n_blocks < t.panels && t.m_blocks * t.n_blocks < 8) ++t.n_blocks;
  t.tile_panels = (t.panels + t.n_blocks - 1) / t.n_blocks;
  return t;
}

namespace {

// How a micro-row fetches B before it needs it (kernel_tuning().gemm_prefetch_b): 0 not at all
// (the hardware prefetchers only), 1 its own slice kPrefetchAhead rows ahead, 2 a share of the
// next slice into L2: the micro-rows of a panel read the same slice one after another, and each
// fetches 1/micro_rows of the slice the next panel will read, spread over its k loop, so a B
// streaming from memory arrives at the pace of the arithmetic (a lone micro-row, or the last
// panel, fetches its own slice ahead as in 1). Only which lines are fetched when differs: the
// same loads and FMAs, the same bits.
class SliceFetch {
 public:
  SliceFetch(const MicroKernel& mk, int64_t kc, int64_t rows)
      : mk_(mk), mode_(kernel_tuning().gemm_prefetch_b), kc_(kc), micro_rows_((rows + mk.mr - 1) / mk.mr),
        slice_lines_(kc * kPanel / 16), lines_each_((slice_lines_ + micro_rows_ - 1) / micro_rows_) {
    if (!mk.fn_prefetch) mode_ = 0;
    if (mode_ == 2 && (!mk.fn_stream || micro_rows_ < 2)) mode_ = 1;
  }
  // Micro-row m (rows [m·mr, m·mr + rows) of the block) against the slice bp; next: the slice
  // read after this one, or null.
  void run(int64_t m, const float* a, int64_t lda, const float* bp, const float* next, float* c, int64_t ldc,
           int rows, int cols, bool load) const {
    if (mode_ == 2 && next) {
      const int64_t first = std::min(slice_lines_, m * lines_each_);
      mk_.fn_stream(kc_, a, lda, bp, c, ldc, rows, cols, load, next + first * 16,
                    std::min(slice_lines_ - first, lines_each_));
    } else if (mode_ >= 1) {
      mk_.fn_prefetch(kc_, a, lda, bp, c, ldc, rows, cols, load, bp + kPrefetchAhead * kPanel);
    } else {
      mk_.fn(kc_, a, lda, bp, c, ldc, rows, cols, load);
    }
  }

 private:
  const MicroKernel& mk_;
  int64_t mode_, kc_, micro_rows_, slice_lines_, lines_each_;
};

}  // namespace

void block_gemm(const MicroKernel& mk, const float* a, int64_t lda, int64_t M, int64_t K,
                const float* b, int64_t panel_stride, int64_t N, float* c, int64_t ldc, bool load) {
  const SliceFetch fetch(mk, K, M);
  for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
    const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - j0));
    const float* bp = b + (j0 / kPanel) * panel_stride;
    const float* next = j0 + kPanel < N ? bp + panel_stride : nullptr;
    for (int64_t i0 = 0; i0 < M; i0 += mk.mr) {
      const int rows = static_cast<int>(std::min<int64_t>(mk.mr, M - i0));
      fetch.run(i0 / mk.mr, a + i0 * lda, lda, bp, next, c + i0 * ldc + j0, ldc, rows, cols, load);
    }
  }
}

void run_gemm(const ASource& src, int64_t M, const PackedMatrix& b, float* c, int64_t ldc,
              const Epilogue& ep) {
  if (M <= 0) return;
  if (b.empty()) fail("gemm: the weight matrix was never packed");
  if (b.precision() == Precision::BF16) return run_gemm_bf16(src, M, b, c, ldc, ep);
  const MicroKernel mk = micro_kernel(kernel_isa());
  const int64_t K = b.K(), N = b.N();
  const int64_t kc_max = chunk_size_f32(K);
  const GemmTiling tiling = gemm_tiling(M, N, mk.mr);
  const int64_t mc = tiling.mc, n_blocks = tiling.n_blocks, tile_panels = tiling.tile_panels;
  const int64_t panels = tiling.panels;
  const bool scratch = src.needs_scratch();

  // One K chunk of rows [i0, i0 + rows) × panels [p0, p1): the A block once, then every panel.
  auto compute = [&](float* buffer, int64_t i0, int64_t rows, int64_t p0, int64_t p1, int64_t k0) {
    const int64_t kc = std::min(kc_max, K - k0);
    const bool last = k0 + kc == K;
    const bool load = k0 > 0 || ep.accumulate;
    int64_t lda = 0;
    const float* a = src.rows(i0, rows, k0, kc, buffer, &lda);
    const SliceFetch fetch(mk, kc, rows);
    for (int64_t p = p0; p < p1; ++p) {
      const float* bp = b.data() + p * K * kPanel + k0 * kPanel;
      const int64_t j0 = p * kPanel;
      const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - j0));
      // The slice read next: the next panel's, the next K chunk's first panel's, or after the
      // last chunk the first slice of the panels after these (the next tile's, when one thread
      // takes both).
      const float* next = p + 1 < p1       ? bp + K * kPanel
                          : k0 + kc < K   ? b.data() + p0 * K * kPanel + (k0 + kc) * kPanel
                          : p1 < panels   ? b.data() + p1 * K * kPanel
                                          : nullptr;
      for (int64_t r = 0; r < rows; r += mk.mr) {
        const int mr = static_cast<int>(std::min<int64_t>(mk.mr, rows - r));
        fetch.run(r / mk.mr, a + r * lda, lda, bp, next, c + (i0 + r) * ldc + j0, ldc, mr, cols, load);
        if (last && (ep.bias || ep.residual)) apply_epilogue(c, ldc, i0 + r, mr, j0, cols, ep);
      }
    }
  };

  // A weight larger than the last-level cache with few row blocks (the 16×16 and 8×8 levels'
  // MLPs: 26–52 MB of weights for 512 rows) would stream every B slice from DRAM once per row
  // block. Then a tile is a few panels for all rows instead: each slice is read once per K chunk
  // and reused, from L2, by every row block. Same sums in the same order either way.
  const KernelTuning& tuning = kernel_tuning();
  const bool b_streams = K * N * int64_t{sizeof(float)} > (tuning.gemm_stream_b_mib << 20) &&
                         tiling.m_blocks <= 8 && src.cheap_rows();
  if (b_streams) {
    // 8 panels a tile (gemm_stream_panels: 8 B slices, 320 KiB, stay in L2), or half as many when
    // that leaves few tiles to share.
    const int64_t stream_panels = tuning.gemm_stream_panels;
    const int64_t kTilePanels = panels >= 8 * stream_panels ? stream_panels : std::max<int64_t>(1, stream_panels / 2);
    const int64_t tiles = (panels + kTilePanels - 1) / kTilePanels;
    parallel_for(tiles, [&](int64_t t0, int64_t t1) {
      float* buffer = scratch ? thread_scratch(mc * scratch_lda(kc_max)) : nullptr;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p0 = t * kTilePanels, p1 = std::min(panels, p0 + kTilePanels);
        for (int64_t k0 = 0; k0 < K; k0 += kc_max)
          for (int64_t i0 = 0; i0 < M; i0 += mc) compute(buffer, i0, std::min(mc, M - i0), p0, p1, k0);
      }
    });
    return;
  }

  parallel_for(tiling.m_blocks * n_blocks, [&](int64_t t0, int64_t t1) {
    float* buffer = scratch ? thread_scratch(mc * scratch_lda(kc_max)) : nullptr;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / n_blocks) * mc, rows = std::min(mc, M - i0);
      const int64_t p0 = (t % n_blocks) * tile_panels, p1 = std::min(panels, p0 + tile_panels);
      for (int64_t k0 = 0; k0 < K; k0 += kc_max) compute(buffer, i0, rows, p0, p1, k0);
    }
  });
}

}  // namespace detail

void gemm(const float* a, int64_t M, int64_t lda, const PackedMatrix& b, float* c, int64_t ldc,
          const Epilogue& epilogue) {
  if (lda < b.K()) fail(cat("gemm: lda ", lda, " < K ", b.K()));
  if (ldc < b.N()) fail(cat("gemm: ldc ", ldc, " < N ", b.N()));
  detail::run_gemm(detail::DirectA(a, lda), M, b, c, ldc, epilogue);
}

void gemm_abt(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
              int64_t M, int64_t N, int64_t K) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, 0.0f);
    return;
  }
  // Pack Bᵀ (strided rows) into panels, then the ordinary driver.
  PackedMatrix p = allocate_packed(K, N);
  float* dst = p.mutable_data();
  for (int64_t n = 0; n < N; ++n) {
    float* panel = dst + (n / kPanel) * K * kPanel + n % kPanel;
    const float* src = b + n * ldb;
    for (int64_t k = 0; k < K; ++k) panel[k * kPanel] = src[k];
  }
  detail::run_gemm(detail::DirectA(a, lda), M, p, c, ldc, {});
}

}  // namespace octodiff::kernels
