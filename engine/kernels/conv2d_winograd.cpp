// 3×3 convolution (stride 1, padding 1) as Winograd F(m×m, 3×3), after Lavin & Gray (2015), for
// two output tiles m: 2 (every precision) and 4 (float32 only); and the same convolution of a 2×
// nearest-upsampled image as F(3×3, 2×2) on the image itself (every precision, see F3x3Up).
//
// The output is cut into m×m tiles; tile t reads the α×α input patch d around it (α = m + 2). The
// tile's output is Aᵀ [Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B)] A: for each of the α² positions p of the
// transformed tile, one GEMM V_p (tiles × Ci) · U_p (Ci × Co). U, the transformed weight, is
// packed once as an (α²·Ci) × Co matrix whose rows p·Ci … p·Ci+Ci−1 are U_p, so U_p is a slice of
// every panel and the ordinary micro-kernels run the GEMMs.
//   F(2×2): Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1],
//           Aᵀ = [1 1 1 0; 0 1 -1 -1]: 16 products per 4 outputs (2.25× fewer than direct).
//   F(4×4): the points 0, ±1, ±2, ∞ —
//           Bᵀ = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
//           G = [¼ 0 0; -⅙ -⅙ -⅙; -⅙ ⅙ -⅙; 1/24 1/12 ⅙; 1/24 -1/12 ⅙; 0 0 1],
//           Aᵀ = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]: 36 products per 16
//           outputs (4× fewer), a transformed weight 4× the direct one's size (F(2×2): 16/9), and
//           transforms with coefficients up to 8 — fine in float32 (1.1e-5 relative at 400 input
//           channels in winograd_test, F(2×2) 7e-7), too coarse for bf16-rounded transformed
//           tiles (6e-2: tools/winograd_bf16_error.py).
//
// Work is cut into blocks of whole micro-rows of tiles; a thread takes a block through all
// three stages (transform in, α² GEMMs, transform out) in its own scratch, so the transformed
// data stays in its caches. A tile reads its input patch in place (a padded copy only at the
// image's edges). With float32 weights, the memory the thread's next block will read and write
// is fetched into L2 while this block's GEMMs run (BlockPrefetch): at 512×512 × 64 channels,
// TAESD's top level, that made F(4×4) 1.06–1.14× faster on Zen 4 (bf16: no gain, not done). Each output
// element's arithmetic is fixed by the tile alone (K in fixed chunks, in order), so results do not depend on
// the block size or the thread count. An output larger than the L3 (kernel_tuning().winograd_stream_kib:
// the autoencoders' 512² levels) is written with non-temporal stores: it would not be in the caches
// when the next layer reads it, and on its way it would evict the blocks' transformed tiles.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/conv2d.h"
#include "kernels/internal.h"
#include "kernels/isa.h"
#include "kernels/winograd_lanes.h"

namespace octodiff::kernels::detail {
namespace {

// H × W: the input; Ho × Wo: the output (2H × 2W when upsampling); tiles over the input.
struct Geometry {
  int64_t N, H, W, Ci, Co;
  int64_t tiles_y, tiles_x;
  int64_t Ho, Wo;
};

// A 3×3 convolution's own kernel, for the two tiles of the plain convolution: r taps per axis, one
// output per tile position (sub = 1), the weight as it is.
struct Plain3x3 {
  static constexpr int r = 3, sub = 1;
  static void kernel(const float* g, int /*s*/, double k[3][3]) {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) k[i][j] = g[i * 3 + j];
  }
};

// Aᵀ m A for one tile, 16 channels: Tile::at (Aᵀ x for one column or row of α) on each column of
// the α×α positions (position p = i·α + j at m + p·ms), then on each row.
template <typename Tile>
void output_transform(const float* m, int64_t ms, Lanes out[Tile::m][Tile::m]) {
  constexpr int kAlpha = Tile::alpha, kM = Tile::m;
  Lanes s[kM][kAlpha];  // s[i][j] = (Aᵀ m)[i][j]
  for (int j = 0; j < kAlpha; ++j) {
    Lanes x[kAlpha], sc[kM];
    for (int i = 0; i < kAlpha; ++i) x[i] = load(m + (i * kAlpha + j) * ms);
    Tile::at(x, sc);
    for (int i = 0; i < kM; ++i) s[i][j] = sc[i];
  }
  for (int i = 0; i < kM; ++i) Tile::at(s[i], out[i]);
}

// F(2×2, 3×3). input: Bᵀ d B for 16 channels of one tile into v + p·vs, p = i·4 + j, the patch's
// element (i, j) (input row 2ty−1+i, column 2tx−1+j) at d + i·row + j·col. at: Aᵀ for
// output_transform, whose out[i][j] is output row 2ty+i, column 2tx+j.
struct F2x2 : Plain3x3 {
  static constexpr int m = 2, alpha = 4, positions = 16;
  static constexpr bool f2x2_input = true;  // winograd_input_bf16_fn applies
  static constexpr double G[alpha][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

  // Bᵀ d B: winograd_lanes.h (shared with the bf16 input transforms of winograd_avx512.cpp).
  static void input(const float* d, int64_t row, int64_t col, float* v, int64_t vs) {
    winograd_f2x2_input(d, row, col, [&](int p, Lanes x) { store(v + p * vs, x); });
  }

  // Aᵀ x for one column or row of four.
  static void at(const Lanes x[4], Lanes o[2]) {
    o[0] = x[0] + x[1] + x[2];
    o[1] = x[1] - x[2] - x[3];
  }
};

// F(4×4, 3×3), the same two stages on 6×6 input and 4×4 output tiles, one 1-D transform per
// column and then per row.
struct F4x4 : Plain3x3 {
  static constexpr int m = 4, alpha = 6, positions = 36;
  static constexpr bool f2x2_input = false;
  static constexpr double G[alpha][3] = {{1.0 / 4, 0, 0},
                                         {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                         {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                         {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                         {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                         {0, 0, 1}};

  // Bᵀ x for one column or row of six.
  static void bt(const Lanes x[6], Lanes t[6]) {
    const Lanes four = Lanes{} + 4.0f, five = Lanes{} + 5.0f, two = Lanes{} + 2.0f;
    t[0] = four * x[0] - five * x[2] + x[4];
    t[1] = (x[3] + x[4]) - four * (x[1] + x[2]);
    t[2] = (x[4] - x[3]) + four * (x[1] - x[2]);
    t[3] = (x[4] - x[2]) + two * (x[3] - x[1]);
    t[4] = (x[4] - x[2]) - two * (x[3] - x[1]);
    t[5] = four * x[1] - five * x[3] + x[5];
  }
  // Aᵀ x for one column or row of six.
  static void at(const Lanes x[6], Lanes o[4]) {
    const Lanes two = Lanes{} + 2.0f, four = Lanes{} + 4.0f, eight = Lanes{} + 8.0f;
    const Lanes sum12 = x[1] + x[2], dif12 = x[1] - x[2], sum34 = x[3] + x[4], dif34 = x[3] - x[4];
    o[0] = x[0] + sum12 + sum34;
    o[1] = dif12 + two * dif34;
    o[2] = sum12 + four * sum34;
    o[3] = dif12 + eight * dif34 + x[5];
  }

  static void input(const float* d, int64_t row, int64_t col, float* v, int64_t vs) {
    Lanes t[6][6];  // t[i][j] = (Bᵀ d)[i][j]
    for (int j = 0; j < 6; ++j) {
      Lanes x[6], tc[6];
      for (int i = 0; i < 6; ++i) x[i] = load(d + i * row + j * col);
      bt(x, tc);
      for (int i = 0; i < 6; ++i) t[i][j] = tc[i];
    }
    for (int i = 0; i < 6; ++i) {
      Lanes r[6];
      bt(t[i], r);
      for (int j = 0; j < 6; ++j) store(v + (i * 6 + j) * vs, r[j]);
    }
  }

};

// The 3×3 convolution (padding 1) of x upsampled 2× by nearest neighbour, computed on x itself: an
// output pixel 2u+1+ry, 2v+1+rx (ry, rx ∈ {0, 1}, "sub-position" s = 2·ry + rx) sees only x's 2×2
// window at rows u, u+1 and columns v, v+1, through a 2×2 kernel made of the 3×3 one's taps
// (ry = 0: rows [g0 + g1, g2], ry = 1: [g0, g1 + g2]; columns alike). So the convolution is a 2×2 one
// over x padded by one pixel with 4·Co outputs per window origin (u, v) ∈ [−1, H−1] × [−1, W−1],
// done as F(3×3, 2×2) — the points 0, ±1, ∞ of F(2×2, 3×3), so its small coefficients and
// accuracy (every precision):
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1] (F(2×2)'s),  G = [1 0; ½ ½; ½ -½; 0 -1],
//   Aᵀ = [1 1 1 0; 0 1 -1 0; 0 1 1 1]:
// a 4×4 patch of x gives 3×3 origins × 4 sub-positions = 6×6 outputs for 16 GEMM positions of
// N = 4·Co: 1.78 products per output and input channel (F(2×2, 3×3) on the upsampled image: 4,
// F(4×4, 3×3): 2.25), transforms on a quarter of the pixels, and no upsampled copy. The packed
// weight is 64/9 the direct one's size.
struct F3x3Up {
  static constexpr int m = 3, alpha = 4, positions = 16, r = 2, sub = 2;
  static constexpr bool f2x2_input = true;
  static constexpr double G[alpha][2] = {{1, 0}, {0.5, 0.5}, {0.5, -0.5}, {0, -1}};

  // Sub-position s's 2×2 kernel from the 3×3 weight g.
  static void kernel(const float* g, int s, double k[2][2]) {
    const int ry = s / 2, rx = s % 2;
    double rows[2][3];
    for (int j = 0; j < 3; ++j) {
      rows[0][j] = ry == 0 ? double{g[j]} + g[3 + j] : g[j];
      rows[1][j] = ry == 0 ? double{g[6 + j]} : double{g[3 + j]} + g[6 + j];
    }
    for (int i = 0; i < 2; ++i) {
      k[i][0] = rx == 0 ? rows[i][0] + rows[i][1] : rows[i][0];
      k[i][1] = rx == 0 ? rows[i][2] : rows[i][1] + rows[i][2];
    }
  }

  // F(2×2, 3×3)'s Bᵀ (the same points; its ∞ row's sign is in G's here).
  static void input(const float* d, int64_t row, int64_t col, float* v, int64_t vs) {
    F2x2::input(d, row, col, v, vs);
  }

  // Aᵀ x for one column or row of four.
  static void at(const Lanes x[4], Lanes o[3]) {
    o[0] = x[0] + x[1] + x[2];
    o[1] = x[1] - x[2];
    o[2] = x[1] + x[2] + x[3];
  }
};

// The geometry of a convolution of N × H × W × Ci into Co channels with Tile: kM outputs per tile
// and axis over the output positions 0 … H−1, or for the upsampling tile over the window origins
// −1 … H−1 (H + 1 of them); the output Tile::sub times the input's size.
template <typename Tile>
Geometry tiled(int64_t N, int64_t H, int64_t W, int64_t Ci, int64_t Co) {
  const auto tiles = [](int64_t n) { return (n + Tile::sub - 1 + Tile::m - 1) / Tile::m; };
  return {N, H, W, Ci, Co, tiles(H), tiles(W), Tile::sub * H, Tile::sub * W};
}

// One thread's scratch: the block's transformed input (α² positions × T rows: f32, or for bf16
// weights bf16 with one tile's f32 rows before rounding), the GEMM outputs (α² × T rows) and one
// α×α input patch with its padding (for the tiles at the image's edges).
struct Scratch {
  float* v = nullptr;     // position p, tile row r at v[(p·T + r)·ldv] (bf16: v[p·ldv], one tile)
  uint16_t* v16 = nullptr;  // v16[(p·T + r)·ldv16]; Split activations: low halves at p + α²
  float* m = nullptr;     // position p, tile row r at m[(p·T + r)·ldm]
  float* patch = nullptr;  // element (i, j) at patch[(i·α + j)·Ci]
};

// Tile t's image n and tile row and column; next() steps to tile t + 1 without a division.
struct TileIndex {
  int64_t n, ty, tx;
  TileIndex(const Geometry& g, int64_t t)
      : n(t / (g.tiles_x * g.tiles_y)), ty((t / g.tiles_x) % g.tiles_y), tx(t % g.tiles_x) {}
  void next(const Geometry& g) {
    if (++tx < g.tiles_x) return;
    tx = 0;
    if (++ty < g.tiles_y) return;
    ty = 0;
    ++n;
  }
};

// The memory a block of tiles will read and write (its input rows, output rows and residual
// rows, as contiguous segments), fetched a slice at a time while the block before it multiplies:
// its GEMMs are compute-bound and leave the memory idle, and at the autoencoders' top levels the
// image (tens of MiB) comes from memory, which transform_in and transform_out would otherwise
// wait for. Fetching changes no arithmetic.
class BlockPrefetch {
 public:
  void clear() {
    segments_.clear();
    next_ = 0;
    offset_ = 0;
    lines_ = 0;
  }
  void add(const float* p, int64_t floats, bool write) {
    if (floats <= 0) return;
    const char* start = reinterpret_cast<const char*>(p);
    segments_.push_back({start, floats * static_cast<int64_t>(sizeof(float)), write});
    lines_ += (floats * static_cast<int64_t>(sizeof(float)) + 63) / 64;
  }
  int64_t lines() const { return lines_; }
  // The next `lines` cache lines of the plan, into L2.
  void issue(int64_t lines) {
    for (; lines > 0 && next_ < segments_.size(); ++next_, offset_ = 0) {
      const Segment& g = segments_[next_];
      for (; lines > 0 && offset_ < g.bytes; offset_ += 64, --lines) {
        if (g.write)
          __builtin_prefetch(g.start + offset_, 1, 2);
        else
          __builtin_prefetch(g.start + offset_, 0, 2);
      }
      if (offset_ < g.bytes) return;
    }
  }

 private:
  struct Segment {
    const char* start;
    int64_t bytes;
    bool write;
  };
  std::vector<Segment> segments_;
  size_t next_ = 0;
  int64_t offset_ = 0, lines_ = 0;
};

template <typename Tile>
class WinogradConv {
  static constexpr int kM = Tile::m, kAlpha = Tile::alpha, kP = Tile::positions, kSub = Tile::sub;

 public:
  WinogradConv(const float* x, const Geometry& g, const Conv2dWeights& w, float* y, const float* residual, bool relu)
      : x_(x), g_(g), w_(w), y_(y), residual_(residual), relu_(relu), bf16_(w.packed.precision() == Precision::BF16) {
    const Isa isa = kernel_isa();
    mk_ = micro_kernel(isa);
    mk16_ = micro_kernel_bf16(isa);
    convert_ = to_bf16_fn(isa, kernel_bf16_instructions());
    convert_low_ = to_bf16_low_fn(isa, kernel_bf16_instructions());
    halves_ = bf16_ && bf16_activations() == Bf16Activations::Split ? 2 : 1;
    if (bf16_ && halves_ == 1 && Tile::f2x2_input)
      input16_ = winograd_input_bf16_fn(isa, kernel_bf16_instructions());
    mr_ = bf16_ ? mk16_.mr : mk_.mr;
    stream_ = winograd_streams_output(g.N * g.Ho * g.Wo * g.Co * static_cast<int64_t>(sizeof(float)), y);
    ldv_ = scratch_lda(g.Ci);
  }

  void run() {
    const int64_t tiles = g_.N * g_.tiles_y * g_.tiles_x;
    const int64_t slots = std::max<int64_t>(1, current_device().threads);
    // Blocks of up to winograd_micro_rows micro-rows (8 on Zen 4, the GEMM drivers' row block) of
    // F(2×2) tiles, and of F(4×4) tiles as many as hold about as many transformed rows (16/36 of
    // them), as many blocks as a multiple of the thread count so that equally fast threads finish
    // together; the threads claim blocks as they go, so a slowed one takes fewer.
    const int64_t micro_rows = std::max<int64_t>(1, (kernel_tuning().winograd_micro_rows * 16 + kP - 1) / kP);
    const int64_t block_rows = micro_rows * mr_;
    int64_t blocks = (tiles + block_rows - 1) / block_rows;
    blocks = (blocks + slots - 1) / slots * slots;
    rows_ = ((tiles + blocks - 1) / blocks + mr_ - 1) / mr_ * mr_;
    blocks = (tiles + rows_ - 1) / rows_;

    lay_out_scratch();
    const size_t v_floats = static_cast<size_t>(bf16_ ? kP * ldv_ : v_.size(rows_, kP));
    const size_t v16_halves = bf16_ ? static_cast<size_t>(v16_.size(rows_, halves_ * kP)) : 0;
    const size_t m_floats = static_cast<size_t>(m_.size(rows_, kP));
    const size_t patch_floats = static_cast<size_t>(kP * g_.Ci);
    const size_t per_slot =
        (v_floats + m_floats + patch_floats) * sizeof(float) + (v16_halves * sizeof(uint16_t) + 63) / 64 * 64;
    const CallScratch buffer(per_slot * static_cast<size_t>(slots));
    char* base = buffer.get<char>();
    std::atomic<int64_t> next_block{0};
    parallel_for(slots, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        char* p = base + per_slot * s;
        Scratch sc;
        sc.v = reinterpret_cast<float*>(p);
        sc.m = sc.v + v_floats;
        sc.patch = sc.m + m_floats;
        sc.v16 = bf16_ ? reinterpret_cast<uint16_t*>(sc.patch + patch_floats) : nullptr;
        BlockPrefetch ahead;
        // Blocks are claimed one at a time (a thread the OS or another tenant slows takes fewer),
        // each the next one claimed ahead so that its memory can be fetched meanwhile.
        for (int64_t b = next_block.fetch_add(1); b < blocks;) {
          const int64_t following = next_block.fetch_add(1);
          const int64_t t0 = b * rows_, count = std::min(rows_, tiles - t0);
          transform_in(sc, t0, count);
          ahead.clear();
          if (!bf16_ && following < blocks)
            plan_prefetch(&ahead, following * rows_, std::min(rows_, tiles - following * rows_));
          multiply(sc, count, &ahead);
          transform_out(sc, t0, count);
          b = following;
        }
        if (stream_) stream_fence();
      }
    });
  }

 private:
  // Where the block's transformed tiles (v_ f32, v16_ bf16) and GEMM outputs (m_) go: by tile, a
  // tile's α² positions side by side in one row (the transforms read and write a tile as one run:
  // Zen 4, paired, TAESD decode ×1.00–1.03 and encode ×1.01–1.07, F(4×4) at 512² × 128 ×1.05–1.08,
  // bf16 F(2×2) at 256² × 256 ×1.01–1.02 and 64² × 320 ×1.03–1.04), or for more input channels than
  // kernel_tuning().winograd_tilewise_channels by position, each position's rows together (a
  // GEMM's operand as one run: f32 F(2×2) with 1920 channels ×0.97–0.99 by tile).
  void lay_out_scratch() {
    const int64_t columns = kSub * kSub * g_.Co;
    if (g_.Ci <= kernel_tuning().winograd_tilewise_channels) {
      v_ = {scratch_lda(kP * g_.Ci), g_.Ci};
      v16_ = {scratch_lda_bf16(halves_ * kP * g_.Ci), g_.Ci};
      m_ = {scratch_lda(kP * columns), columns};
    } else {
      const int64_t ldv16 = scratch_lda_bf16(g_.Ci), ldm = scratch_lda(columns);
      v_ = {ldv_, rows_ * ldv_};
      v16_ = {ldv16, rows_ * ldv16};
      m_ = {ldm, rows_ * ldm};
    }
  }

  // What tiles t0 … t0 + count − 1 read (input rows, with the halo) and write (output and
  // residual rows), one segment per image row of each run of tiles in one tile row.
  void plan_prefetch(BlockPrefetch* ahead, int64_t t0, int64_t count) const {
    const int64_t Ci = g_.Ci, Co = g_.Co;
    TileIndex t(g_, t0);
    for (int64_t left = count; left > 0;) {
      const int64_t run = std::min(left, g_.tiles_x - t.tx);
      const int64_t in0 = std::max<int64_t>(0, kM * t.tx - 1),
                    in1 = std::min(g_.W, kM * (t.tx + run) - kM - 1 + kAlpha);
      for (int64_t iy = std::max<int64_t>(0, kM * t.ty - 1); iy < std::min(g_.H, kM * t.ty - 1 + kAlpha);
           ++iy)
        ahead->add(x_ + ((t.n * g_.H + iy) * g_.W + in0) * Ci, (in1 - in0) * Ci, false);
      const int64_t x0 = std::max<int64_t>(0, out_origin(t.tx)), x1 = std::min(g_.Wo, out_origin(t.tx + run));
      for (int64_t oy = std::max<int64_t>(0, out_origin(t.ty)); oy < std::min(g_.Ho, out_origin(t.ty + 1));
           ++oy) {
        const int64_t at = ((t.n * g_.Ho + oy) * g_.Wo + x0) * Co;
        ahead->add(y_ + at, (x1 - x0) * Co, true);
        if (residual_) ahead->add(residual_ + at, (x1 - x0) * Co, false);
      }
      left -= run;
      for (int64_t i = 0; i < run; ++i) t.next(g_);
    }
  }

  // The first output row (column) of tile row (column) t: kM·t, or for the upsampling tile the
  // sub-position 1 of the origin before its first, 2·(kM·t − 1) + 1.
  static int64_t out_origin(int64_t t) { return kSub * kM * t - (kSub - 1); }

  // The α×α patch of tile (n, ty, tx) with the zero padding, copied into sc.patch (edge tiles only).
  const float* edge_patch(const Scratch& sc, const TileIndex& t) const {
    const int64_t Ci = g_.Ci;
    for (int i = 0; i < kAlpha; ++i)
      for (int j = 0; j < kAlpha; ++j) {
        const int64_t iy = kM * t.ty - 1 + i, ix = kM * t.tx - 1 + j;
        float* dst = sc.patch + (i * kAlpha + j) * Ci;
        if (iy >= 0 && iy < g_.H && ix >= 0 && ix < g_.W)
          std::memcpy(dst, x_ + ((t.n * g_.H + iy) * g_.W + ix) * Ci,
                      static_cast<size_t>(Ci) * sizeof(float));
        else
          std::memset(dst, 0, static_cast<size_t>(Ci) * sizeof(float));
      }
    return sc.patch;
  }

  void transform_in(const Scratch& sc, int64_t t0, int64_t count) const {
    const int64_t Ci = g_.Ci;
    TileIndex t(g_, t0);
    for (int64_t r = 0; r < count; ++r, t.next(g_)) {
      // The patch in place (rows W·Ci apart) inside the image, else a padded copy.
      const int64_t iy0 = kM * t.ty - 1, ix0 = kM * t.tx - 1;
      const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + kAlpha <= g_.H && ix0 + kAlpha <= g_.W;
      const float* d = inside ? x_ + ((t.n * g_.H + iy0) * g_.W + ix0) * Ci : edge_patch(sc, t);
      const int64_t row = inside ? g_.W * Ci : kAlpha * Ci;
      if (input16_) {  // bf16 rounded in registers, straight into the block's rows
        input16_(d, row, Ci, Ci, sc.v16 + r * v16_.tile, v16_.position);
        continue;
      }
      // f32: straight into the block's rows; bf16: through one tile's f32 rows (sc.v), rounded.
      float* v = bf16_ ? sc.v : sc.v + r * v_.tile;
      const int64_t vs = bf16_ ? ldv_ : v_.position;
      for (int64_t c = 0; c < Ci; c += kLanes) Tile::input(d + c, row, Ci, v + c, vs);
      if (bf16_)
        for (int p = 0; p < kP; ++p) convert_(v + p * vs, Ci, sc.v16 + r * v16_.tile + p * v16_.position);
      if (halves_ == 2)  // Split activations: the low halves after the high ones (gemm.h)
        for (int p = 0; p < kP; ++p)
          convert_low_(v + p * vs, Ci, sc.v16 + r * v16_.tile + (kP + p) * v16_.position);
    }
  }

  // M_p = V_p · U_p for the α² positions, K in the GEMM drivers' fixed chunks. U_p is rows
  // p·Ci … p·Ci+Ci−1 of every panel of the packed weight.
  void multiply(const Scratch& sc, int64_t count, BlockPrefetch* ahead) const {
    const int64_t Ci = g_.Ci, Co = kSub * kSub * g_.Co, K = kP * Ci;
    const int64_t kc_max = bf16_ ? chunk_size_bf16(Ci) : chunk_size_f32(Ci);
    // One micro-row of tiles at a time, so that the next block's fetches spread over the GEMMs.
    const int64_t slices = kP * ((count + mr_ - 1) / mr_);
    const int64_t lines_per_slice = (ahead->lines() + slices - 1) / slices;
    for (int p = 0; p < kP; ++p) {
      float* m = sc.m + p * m_.position;
      for (int64_t i0 = 0; i0 < count; i0 += mr_) {
        ahead->issue(lines_per_slice);
        const int64_t rows = std::min(mr_, count - i0);
        for (int64_t k0 = 0; k0 < Ci; k0 += kc_max) {
          const int64_t kc = std::min(kc_max, Ci - k0);
          if (bf16_) {
            for (int half = 0; half < halves_; ++half)
              block_gemm_bf16(mk16_, sc.v16 + (half * kP + p) * v16_.position + i0 * v16_.tile + k0, v16_.tile, rows,
                              kc / 2, w_.packed.bf16_data() + (p * Ci + k0) / 2 * kPairRow,
                              bf16_pairs(K) * kPairRow, Co, m + i0 * m_.tile, m_.tile, k0 > 0 || half > 0);
          } else {
            block_gemm(mk_, sc.v + p * v_.position + i0 * v_.tile + k0, v_.tile, rows, kc,
                       w_.packed.data() + (p * Ci + k0) * kPanel, K * kPanel, Co, m + i0 * m_.tile, m_.tile,
                       k0 > 0);
          }
        }
      }
    }
  }

  // The output transform with the GEMM epilogue's (Σ + bias) + residual, then ReLU (kernels::relu's
  // a < 0 ? 0 : a, lane by lane), each compiled in only where the call has it.
  template <bool kBias, bool kResidual, bool kRelu>
  void transform_out_with(const Scratch& sc, int64_t t0, int64_t count) const {
    const int64_t Co = g_.Co, row = g_.Wo * Co, ms = m_.position;
    const float* bias = w_.bias.data();
    TileIndex t(g_, t0);
    for (int64_t r = 0; r < count; ++r, t.next(g_)) {
      // Output (i, j) of sub-position (ry, rx) is at row oy + kSub·i + ry, column ox + kSub·j + rx.
      const int64_t oy = out_origin(t.ty), ox = out_origin(t.tx);
      const bool whole = oy >= 0 && ox >= 0 && oy + kSub * kM <= g_.Ho && ox + kSub * kM <= g_.Wo;
      const int64_t at =
          ((t.n * g_.Ho + oy) * g_.Wo + ox) * Co;  // before y's start at its edges: offsets only
      const auto finish = [&](Lanes v, int64_t offset, int64_t c) {
        if constexpr (kBias) v += load(bias + c);
        if constexpr (kResidual) v += load(residual_ + (at + offset));
        if constexpr (kRelu) v = v < 0.0f ? Lanes{} : v;
        if (stream_)
          stream(y_ + (at + offset), v);
        else
          store(y_ + (at + offset), v);
      };
      for (int s = 0; s < kSub * kSub; ++s) {
        const int ry = s / kSub, rx = s % kSub;
        const float* m = sc.m + r * m_.tile + s * Co;
        for (int64_t c = 0; c < Co; c += kLanes) {
          Lanes out[kM][kM];
          output_transform<Tile>(m + c, ms, out);
          if (whole) {
            for (int i = 0; i < kM; ++i)
              for (int j = 0; j < kM; ++j) finish(out[i][j], (kSub * i + ry) * row + (kSub * j + rx) * Co + c, c);
            continue;
          }
          for (int i = 0; i < kM; ++i)
            for (int j = 0; j < kM; ++j) {
              const int64_t dy = kSub * i + ry, dx = kSub * j + rx;
              if (oy + dy >= 0 && oy + dy < g_.Ho && ox + dx >= 0 && ox + dx < g_.Wo)
                finish(out[i][j], dy * row + dx * Co + c, c);
            }
        }
      }
    }
  }

  void transform_out(const Scratch& sc, int64_t t0, int64_t count) const {
    using Fn = void (WinogradConv::*)(const Scratch&, int64_t, int64_t) const;
    static constexpr Fn kWith[8] = {&WinogradConv::transform_out_with<false, false, false>,
                                    &WinogradConv::transform_out_with<false, false, true>,
                                    &WinogradConv::transform_out_with<false, true, false>,
                                    &WinogradConv::transform_out_with<false, true, true>,
                                    &WinogradConv::transform_out_with<true, false, false>,
                                    &WinogradConv::transform_out_with<true, false, true>,
                                    &WinogradConv::transform_out_with<true, true, false>,
                                    &WinogradConv::transform_out_with<true, true, true>};
    const int which = (w_.bias.empty() ? 0 : 4) + (residual_ ? 2 : 0) + (relu_ ? 1 : 0);
    (this->*kWith[which])(sc, t0, count);
  }

  const float* x_;
  Geometry g_;
  const Conv2dWeights& w_;
  float* y_;
  const float* residual_;
  bool relu_;
  bool bf16_;
  MicroKernel mk_;
  MicroKernelBf16 mk16_;
  ToBf16Fn convert_ = nullptr, convert_low_ = nullptr;
  WinogradInputBf16Fn input16_ = nullptr;
  int halves_ = 1;
  bool stream_ = false;  // the output bypasses the caches (winograd_streams_output)
  // ldv_: the row stride of Ci floats (the bf16 path's one tile of f32 rows, and v_ by position);
  // rows_: tiles per block.
  int64_t mr_ = 1, ldv_ = 0, rows_ = 0;
  // Row r, position p of a scratch array at r·tile + p·position (lay_out_scratch).
  struct Strides {
    int64_t tile = 0, position = 0;
    int64_t size(int64_t rows, int64_t positions) const { return std::max(rows * tile, positions * position); }
  };
  Strides v_, v16_, m_;
};

// U = G k Gᵀ per (output column q, ci), in double, stored as pack_b's transposed input: row q,
// column p·Ci + ci. k is the weight's kernel for sub-position q / Co (Tile::kernel) and output
// channel q % Co; q = co for the plain convolution.
template <typename Tile>
void weight_rows(const float* w, int64_t Ci, int64_t Co, int64_t q0, int64_t n, float* dst) {
  constexpr int kAlpha = Tile::alpha, kR = Tile::r;
  for (int64_t r = 0; r < n; ++r) {
    float* row = dst + r * Tile::positions * Ci;
    const int64_t q = q0 + r, s = q / Co, co = q % Co;
    for (int64_t ci = 0; ci < Ci; ++ci) {
      double k[kR][kR];
      Tile::kernel(w + (co * Ci + ci) * 9, static_cast<int>(s), k);
      double gk[kAlpha][kR];  // G k
      for (int i = 0; i < kAlpha; ++i)
        for (int j = 0; j < kR; ++j) {
          double v = Tile::G[i][0] * k[0][j];
          for (int b = 1; b < kR; ++b) v += Tile::G[i][b] * k[b][j];
          gk[i][j] = v;
        }
      for (int i = 0; i < kAlpha; ++i)
        for (int j = 0; j < kAlpha; ++j) {
          double v = gk[i][0] * Tile::G[j][0];
          for (int b = 1; b < kR; ++b) v += gk[i][b] * Tile::G[j][b];
          row[(i * kAlpha + j) * Ci + ci] = static_cast<float>(v);
        }
    }
  }
}

}  // namespace

bool winograd_streams_output(int64_t bytes, const float* y) {
  const int64_t kib = kernel_tuning().winograd_stream_kib;
  return kib > 0 && bytes > kib * 1024 && reinterpret_cast<uintptr_t>(y) % 64 == 0;
}

WinogradInputBf16Fn winograd_input_bf16_fn(Isa isa, bool dot) {
  if (isa != Isa::Avx512) return nullptr;
  return dot ? &winograd_input_bf16_avx512_dot : &winograd_input_bf16_avx512;
}

int winograd_positions(ConvAlgorithm algorithm) {
  return algorithm == ConvAlgorithm::Winograd4x4 ? F4x4::positions : F2x2::positions;  // F3x3Up: 16 too
}

void winograd_weight_rows(ConvAlgorithm algorithm, const float* w, int64_t Ci, int64_t Co, int64_t q0,
                          int64_t n, float* dst) {
  switch (algorithm) {
    case ConvAlgorithm::Winograd4x4:
      return weight_rows<F4x4>(w, Ci, Co, q0, n, dst);
    case ConvAlgorithm::WinogradUpsample2x:
      return weight_rows<F3x3Up>(w, Ci, Co, q0, n, dst);
    default:
      return weight_rows<F2x2>(w, Ci, Co, q0, n, dst);
  }
}

void conv2d_winograd(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w, float* y,
                     const float* residual, bool relu) {
  const int64_t Ci = w.in_channels, Co = w.out_channels;
  const int positions = winograd_positions(w.algorithm);
  const int64_t columns = conv2d_packed_columns(Co, w.algorithm);
  if (Ci % kLanes != 0 || Co % kLanes != 0 || w.packed.K() != positions * Ci || w.packed.N() != columns)
    fail(cat("internal: Winograd weight ", Co, "x", Ci, " packed as ", w.packed.K(), "x", w.packed.N()));
  switch (w.algorithm) {
    case ConvAlgorithm::Winograd4x4: {
      if (w.packed.precision() != Precision::F32)
        fail("internal: a Winograd F(4x4, 3x3) weight packed as bf16");
      return WinogradConv<F4x4>(x, tiled<F4x4>(N, H, W, Ci, Co), w, y, residual, relu).run();
    }
    case ConvAlgorithm::WinogradUpsample2x:
      return WinogradConv<F3x3Up>(x, tiled<F3x3Up>(N, H, W, Ci, Co), w, y, residual, relu).run();
    default:
      return WinogradConv<F2x2>(x, tiled<F2x2>(N, H, W, Ci, Co), w, y, residual, relu).run();
  }
}

}  // namespace octodiff::kernels::detail
