// The bf16 GEMM: weights packed as pair-interleaved bf16 panels, A blocks rounded to bf16 as
// they are gathered, products summed in float32 by the bf16 micro-kernels.
//
// The loop nest and the threading are those of the f32 driver (gemm.cpp): the same tiles, K in
// fixed chunks (here of whole pairs), every output element accumulated by one thread in k
// order, so results are bit-identical for any thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/device.h"
#include "core/half.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {
namespace {
thread_local Bf16Activations t_bf16_activations = Bf16Activations::Rounded;
}  // namespace

Bf16Activations bf16_activations() { return t_bf16_activations; }

ScopedBf16Activations::ScopedBf16Activations(Bf16Activations mode) : previous_(t_bf16_activations) {
  t_bf16_activations = mode;
}
ScopedBf16Activations::~ScopedBf16Activations() { t_bf16_activations = previous_; }

}  // namespace octodiff::kernels

namespace octodiff::kernels::detail {
namespace {

// Portable micro-kernel (4 × 32): widens each pair to float32 (a bf16 is the high half of a
// float) and adds the odd product, then the even one.
template <int MR>
void kernel_generic(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
                    int cols, bool load, const TileEpilogue& ep) {
  float acc[MR][kPanel];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kPanel; ++j) acc[r][j] = (load && j < cols) ? c[r * ldc + j] : 0.0f;
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t* bq = b + q * kPairRow;
    float b0[kPanel], b1[kPanel];
    for (int j = 0; j < kPanel; ++j) {
      b0[j] = bf16_to_f32(bq[2 * j]);
      b1[j] = bf16_to_f32(bq[2 * j + 1]);
    }
    for (int r = 0; r < MR; ++r) {
      const float a0 = bf16_to_f32(a[r * lda + 2 * q]), a1 = bf16_to_f32(a[r * lda + 2 * q + 1]);
      for (int j = 0; j < kPanel; ++j) {
        acc[r][j] += a1 * b1[j];
        acc[r][j] += a0 * b0[j];
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < cols; ++j) {
      float v = acc[r][j];
      if (ep.bias) v += ep.bias[j];
      if (ep.residual) v += ep.residual[r * ep.ldr + j];
      c[r * ldc + j] = v;
    }
}

void dispatch_generic(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc,
                      int rows, int cols, bool load, const TileEpilogue& ep) {
  switch (rows) {
    case 4:
      return kernel_generic<4>(pairs, a, lda, b, c, ldc, cols, load, ep);
    case 3:
      return kernel_generic<3>(pairs, a, lda, b, c, ldc, cols, load, ep);
    case 2:
      return kernel_generic<2>(pairs, a, lda, b, c, ldc, cols, load, ep);
    default:
      return kernel_generic<1>(pairs, a, lda, b, c, ldc, cols, load, ep);
  }
}

}  // namespace

MicroKernelBf16 micro_kernel_bf16_generic() {
  return {4, &dispatch_generic};
}

// K chunk of whole pairs (kernel_tuning().bf16_kc, 768 on Zen 4; even and ≤ kBlockLdaBf16 − 32,
// which the tuning's range enforces): a panel's B slice (kc/2 pair-rows of 128 bytes) and the A
// block (MC × kc bf16) take the bytes an f32 chunk of kc/2 does. Measured on Zen 4: 256…768 within
// noise for the GEMMs, 768 best for the 3×3 convolutions (fewer C-tile reloads).
int64_t chunk_size_bf16(int64_t K) {
  const int64_t max_kc = kernel_tuning().bf16_kc;
  const int64_t chunks = (K + max_kc - 1) / max_kc;
  const int64_t kc = (K + chunks - 1) / chunks;
  return (kc + 1) / 2 * 2;
}

MicroKernelBf16 micro_kernel_bf16(Isa isa) {
  switch (isa) {
    case Isa::Avx512: {
      // Any row count up to the kernel's own (14) is a variant it has.
      MicroKernelBf16 mk = kernel_bf16_dot() ? micro_kernel_bf16_avx512_dot() : micro_kernel_bf16_avx512();
      mk.mr = static_cast<int>(std::min<int64_t>(mk.mr, kernel_tuning().avx512_bf16_mr));
      return mk;
    }
    case Isa::Avx2:
      return micro_kernel_bf16_avx2();
    case Isa::Generic:
      break;
  }
  return micro_kernel_bf16_generic();
}

void to_bf16_generic(const float* x, int64_t n, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

ToBf16Fn to_bf16_fn(Isa isa, bool dot) {
  switch (isa) {
    case Isa::Avx512:
      return dot ? &to_bf16_avx512_dot : &to_bf16_avx512;
    case Isa::Avx2:
      return &to_bf16_avx2;
    case Isa::Generic:
      break;
  }
  return &to_bf16_generic;
}

namespace {

// x − hi(x), rounded by the same converter, through two stack buffers of kChunk values.
template <ToBf16Fn Hi>
void to_bf16_low(const float* x, int64_t n, uint16_t* y) {
  constexpr int64_t kChunk = 256;
  alignas(64) uint16_t hi[kChunk];
  alignas(64) float rest[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    Hi(x + i0, m, hi);
    for (int64_t i = 0; i < m; ++i) {
      const float h = bf16_to_f32(hi[i]);
      rest[i] = std::isfinite(h) ? x[i0 + i] - h : 0.0f;
    }
    Hi(rest, m, y + i0);
  }
}

}  // namespace

ToBf16Fn to_bf16_low_fn(Isa isa, bool dot) {
  switch (isa) {
    case Isa::Avx512:
      return dot ? &to_bf16_low<&to_bf16_avx512_dot> : &to_bf16_low<&to_bf16_avx512>;
    case Isa::Avx2:
      return &to_bf16_low<&to_bf16_avx2>;
    case Isa::Generic:
      break;
  }
  return &to_bf16_low<&to_bf16_generic>;
}

void pack_bf16(const float* b, int64_t K, int64_t N, uint16_t* dst) {
  const int64_t panels = (N + kPanel - 1) / kPanel, pairs = bf16_pairs(K);
  parallel_for(panels, [&](int64_t p0, int64_t p1) {
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int64_t n0 = pi * kPanel, w = std::min<int64_t>(kPanel, N - n0);
      uint16_t* panel = dst + pi * pairs * kPairRow;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < w; ++j) panel[(k / 2) * kPairRow + 2 * j + k % 2] = f32_to_bf16(b[k * N + n0 + j]);
    }
  });
}

// A pair-row of a panel is one 32-bit word (two neighbouring k) from each of W's 32 rows. Per
// block of kBlock k: the rows are rounded into a small tile by the vector converter (exactly
// f32_to_bf16), then the tile's words are transposed into the panel — both stay in L1. Element
// by element, rounding and index arithmetic made packing a full-size model take seconds.
void pack_bf16_panels(int64_t K, int64_t N, const PanelRows& rows, uint16_t* dst) {
  constexpr int64_t kBlock = 128;  // k per block: even, so blocks start on a pair
  const int64_t panels = (N + kPanel - 1) / kPanel, pairs = bf16_pairs(K);
  const ToBf16Fn convert = to_bf16_fn(kernel_isa(), /*dot=*/false);
  const bool avx512 = kernel_isa() == Isa::Avx512;
  parallel_for(panels, [&](int64_t p0, int64_t p1) {
    thread_local ThreadBuffer scratch;
    alignas(64) uint16_t tile[kPanel * kBlock];
    const uint32_t* const words = reinterpret_cast<const uint32_t*>(tile);
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int64_t n0 = pi * kPanel, w = std::min<int64_t>(kPanel, N - n0);
      const float* b = rows(n0, w, scratch.get<float>(kPanel * K));
      if (avx512) {
        pack_bf16_panel_avx512({b, K, K, 1}, 0, w, K, dst + pi * pairs * kPairRow);
        continue;
      }
      uint32_t* panel = reinterpret_cast<uint32_t*>(dst + pi * pairs * kPairRow);
      for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
        const int64_t kn = std::min(kBlock, K - k0), qn = (kn + 1) / 2;
        for (int64_t j = 0; j < w; ++j) {
          convert(b + j * K + k0, kn, tile + j * kBlock);
          if (kn % 2) tile[j * kBlock + kn] = 0;  // the missing half of a last, odd pair
        }
        uint32_t* out = panel + (k0 / 2) * kPanel;
        for (int64_t q = 0; q < qn; ++q)
          for (int64_t j = 0; j < w; ++j) out[q * kPanel + j] = words[j * (kBlock / 2) + q];
      }
    }
  });
}

void block_gemm_bf16(const MicroKernelBf16& mk, const uint16_t* a, int64_t lda, int64_t M, int64_t pairs,
                     const uint16_t* b, int64_t panel_stride, int64_t N, float* c, int64_t ldc, bool load) {
  const float* aw = nullptr;
  if (mk.wide) {  // widened once for every panel
    thread_local ThreadBuffer wide;
    float* w = wide.get<float>(M * lda);
    mk.widen(a, lda, M, 2 * pairs, w);
    aw = w;
  }
  for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
    const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - j0));
    const uint16_t* bp = b + (j0 / kPanel) * panel_stride;
    for (int64_t i0 = 0; i0 < M; i0 += mk.mr) {
      const int rows = static_cast<int>(std::min<int64_t>(mk.mr, M - i0));
      if (aw)
        mk.wide(pairs, aw + i0 * lda, lda, bp, c + i0 * ldc + j0, ldc, rows, cols, load, TileEpilogue{});
      else
        mk.fn(pairs, a + i0 * lda, lda, bp, c + i0 * ldc + j0, ldc, rows, cols, load, TileEpilogue{});
    }
  }
}

void run_gemm_bf16(const ASource& src, int64_t M, const PackedMatrix& b, float* c, int64_t ldc,
                   const Epilogue& ep) {
  const Isa isa = kernel_isa();
  const MicroKernelBf16 mk = micro_kernel_bf16(isa);
  const ToBf16Fn convert = to_bf16_fn(isa, kernel_bf16_instructions());
  // Split activations: every K chunk twice, its high halves then its low halves (gemm.h).
  const ToBf16Fn convert_low = to_bf16_low_fn(isa, kernel_bf16_instructions());
  const int halves = bf16_activations() == Bf16Activations::Split ? 2 : 1;
  const int64_t K = b.K(), N = b.N(), pairs = bf16_pairs(K);
  const int64_t kc_max = chunk_size_bf16(K);
  const GemmTiling tiling = gemm_tiling(M, N, mk.mr);
  const int64_t mc = tiling.mc, n_blocks = tiling.n_blocks, tile_panels = tiling.tile_panels;
  const int64_t lda = kBlockLdaBf16;  // whatever kc is: the micro-kernel has a variant for it

  // Tiles are handed out one at a time (each worker claims its next tile one ahead, so that it
  // can prefetch that tile's A block): threads end within one tile of each other whatever the
  // tile sizes. Which thread computes a tile never changes its arithmetic.
  const int64_t tiles = tiling.m_blocks * n_blocks;
  std::atomic<int64_t> counter{0};
  parallel_for(std::min<int64_t>(current_device().threads, tiles), [&](int64_t, int64_t) {
    thread_local ThreadBuffer buffer, wide_buffer;
    uint16_t* a = buffer.get<uint16_t>(mc * lda);
    float* aw = mk.wide ? wide_buffer.get<float>(mc * lda) : nullptr;  // A widened once for its panels
    for (int64_t t = counter.fetch_add(1); t < tiles;) {
      const int64_t t_next = counter.fetch_add(1);
      const int64_t i0 = (t / n_blocks) * mc, rows = std::min(mc, M - i0);
      const int64_t p0 = (t % n_blocks) * tile_panels, p1 = std::min(tiling.panels, p0 + tile_panels);
      for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
        for (int half = 0; half < halves; ++half) {
          const int64_t kc = std::min(kc_max, K - k0);
          const bool last_chunk = k0 + kc == K, last = last_chunk && half + 1 == halves;
          const bool load = k0 > 0 || half > 0 || ep.accumulate;
          src.rows_bf16(i0, rows, k0, kc, half == 0 ? convert : convert_low, a, lda);
          if (aw) mk.widen(a, lda, rows, kc + kc % 2, aw);
          // The A block this thread gathers next (its next K chunk, or its next tile's first):
          // fetched piecewise while this one computes, so that gathering it does not wait on
          // memory (an activation matrix of tens of MiB is read from DRAM once per GEMM).
          int64_t n_i0 = i0, n_rows = rows, n_k0 = k0 + kc;
          if (last_chunk) {
            n_k0 = 0;
            n_i0 = t_next < tiles ? (t_next / n_blocks) * mc : M;
            n_rows = std::min(mc, M - n_i0);
          }
          const bool fetch_next = n_rows > 0 && (n_i0 != i0 || n_k0 != k0) && half + 1 == halves;
          const int64_t nkc = std::min(kc_max, K - n_k0);
          for (int64_t p = p0; p < p1; ++p) {
            if (fetch_next) {
              const int64_t part = p - p0, parts = p1 - p0;
              src.prefetch(n_i0 + n_rows * part / parts, n_i0 + n_rows * (part + 1) / parts, n_k0, nkc);
            }
            const uint16_t* bp = b.bf16_data() + p * pairs * kPairRow + (k0 / 2) * kPairRow;
            const int64_t j0 = p * kPanel;
            const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - j0));
            for (int64_t r = 0; r < rows; r += mk.mr) {
              const int mr = static_cast<int>(std::min<int64_t>(mk.mr, rows - r));
              float* ct = c + (i0 + r) * ldc + j0;
              TileEpilogue tile;
              if (last) {
                tile.bias = ep.bias ? ep.bias + j0 : nullptr;
                tile.residual = ep.residual ? ep.residual + (i0 + r) * ep.ldr + j0 : nullptr;
                tile.ldr = ep.ldr;
              }
              if (aw)
                mk.wide((kc + 1) / 2, aw + r * lda, lda, bp, ct, ldc, mr, cols, load, tile);
              else
                mk.fn((kc + 1) / 2, a + r * lda, lda, bp, ct, ldc, mr, cols, load, tile);
            }
          }
        }
      }
      t = t_next;
    }
  });
}

}  // namespace octodiff::kernels::detail
