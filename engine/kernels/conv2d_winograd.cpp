// 3×3 convolution (stride 1, padding 1) as Winograd F(m×m, 3×3), after Lavin & Gray (2015), for
// two output tiles m: 2 (every precision) and 4 (float32 only).
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
// data stays in its caches. Each output element's arithmetic is fixed by the tile alone (K in
// fixed chunks, in order), so results do not depend on the block size or the thread count.
#include <algorithm>
#include <cstring>
#include <memory>

#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/conv2d.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels::detail {
namespace {

// 16 channels at once: GCC vector extensions, so the same code is one AVX-512 register or two
// AVX2 ones, whatever the build targets. aligned(4): rows are only float-aligned.
typedef float Lanes __attribute__((vector_size(64), aligned(4)));
constexpr int64_t kLanes = 16;

inline Lanes load(const float* p) { return *reinterpret_cast<const Lanes*>(p); }
inline void store(float* p, Lanes v) { *reinterpret_cast<Lanes*>(p) = v; }

struct Geometry {
  int64_t N, H, W, Ci, Co;
  int64_t tiles_y, tiles_x;
};

// F(2×2, 3×3). input: Bᵀ d B for 16 channels of one tile, d[i·4 + j] = input row 2ty−1+i,
// column 2tx−1+j. output: Aᵀ m A into out[i][j] (output row 2ty+i, column 2tx+j).
struct F2x2 {
  static constexpr int m = 2, alpha = 4, positions = 16;
  static constexpr double G[alpha][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

  static void input(const float* const d[16], int64_t c, float* const v[16]) {
    Lanes t[4][4];
    for (int j = 0; j < 4; ++j) {
      const Lanes d0 = load(d[j] + c), d1 = load(d[4 + j] + c), d2 = load(d[8 + j] + c), d3 = load(d[12 + j] + c);
      t[0][j] = d0 - d2;
      t[1][j] = d1 + d2;
      t[2][j] = d2 - d1;
      t[3][j] = d1 - d3;
    }
    for (int i = 0; i < 4; ++i) {
      store(v[i * 4 + 0] + c, t[i][0] - t[i][2]);
      store(v[i * 4 + 1] + c, t[i][1] + t[i][2]);
      store(v[i * 4 + 2] + c, t[i][2] - t[i][1]);
      store(v[i * 4 + 3] + c, t[i][1] - t[i][3]);
    }
  }

  static void output(const float* const mm[16], int64_t c, Lanes out[2][2]) {
    Lanes s[2][4];
    for (int j = 0; j < 4; ++j) {
      const Lanes m0 = load(mm[j] + c), m1 = load(mm[4 + j] + c), m2 = load(mm[8 + j] + c), m3 = load(mm[12 + j] + c);
      s[0][j] = m0 + m1 + m2;
      s[1][j] = m1 - m2 - m3;
    }
    for (int i = 0; i < 2; ++i) {
      out[i][0] = s[i][0] + s[i][1] + s[i][2];
      out[i][1] = s[i][1] - s[i][2] - s[i][3];
    }
  }
};

// F(4×4, 3×3), the same two stages on 6×6 input and 4×4 output tiles, one 1-D transform per
// column and then per row.
struct F4x4 {
  static constexpr int m = 4, alpha = 6, positions = 36;
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

  static void input(const float* const d[36], int64_t c, float* const v[36]) {
    Lanes t[6][6];  // t[i][j] = (Bᵀ d)[i][j]
    for (int j = 0; j < 6; ++j) {
      Lanes col[6], tc[6];
      for (int i = 0; i < 6; ++i) col[i] = load(d[i * 6 + j] + c);
      bt(col, tc);
      for (int i = 0; i < 6; ++i) t[i][j] = tc[i];
    }
    for (int i = 0; i < 6; ++i) {
      Lanes row[6];
      bt(t[i], row);
      for (int j = 0; j < 6; ++j) store(v[i * 6 + j] + c, row[j]);
    }
  }

  static void output(const float* const mm[36], int64_t c, Lanes out[4][4]) {
    Lanes s[4][6];  // s[i][j] = (Aᵀ m)[i][j]
    for (int j = 0; j < 6; ++j) {
      Lanes col[6], sc[4];
      for (int i = 0; i < 6; ++i) col[i] = load(mm[i * 6 + j] + c);
      at(col, sc);
      for (int i = 0; i < 4; ++i) s[i][j] = sc[i];
    }
    for (int i = 0; i < 4; ++i) at(s[i], out[i]);
  }
};

// One thread's scratch: the block's transformed input (α² positions × T rows: f32, or for bf16
// weights bf16 with one tile's f32 rows before rounding), the GEMM outputs (α² × T rows) and a
// row of zeros for the padding.
struct Scratch {
  float* v = nullptr;     // position p, tile row r at v[(p·T + r)·ldv] (bf16: v[p·ldv], one tile)
  uint16_t* v16 = nullptr;  // v16[(p·T + r)·ldv16]; Split activations: low halves at p + α²
  float* m = nullptr;     // position p, tile row r at m[(p·T + r)·ldm]
  const float* zeros = nullptr;
};

template <typename Tile>
class WinogradConv {
  static constexpr int kM = Tile::m, kAlpha = Tile::alpha, kP = Tile::positions;

 public:
  WinogradConv(const float* x, const Geometry& g, const Conv2dWeights& w, float* y, const float* residual, bool relu)
      : x_(x), g_(g), w_(w), y_(y), residual_(residual), relu_(relu), bf16_(w.packed.precision() == Precision::BF16) {
    const Isa isa = kernel_isa();
    mk_ = micro_kernel(isa);
    mk16_ = micro_kernel_bf16(isa);
    convert_ = to_bf16_fn(isa, kernel_bf16_instructions());
    convert_low_ = to_bf16_low_fn(isa, kernel_bf16_instructions());
    halves_ = bf16_ && bf16_activations() == Bf16Activations::Split ? 2 : 1;
    mr_ = bf16_ ? mk16_.mr : mk_.mr;
    ldv_ = scratch_lda(g.Ci);
    ldv16_ = scratch_lda_bf16(g.Ci);
    ldm_ = scratch_lda(g.Co);
  }

  void run() {
    const int64_t tiles = g_.N * g_.tiles_y * g_.tiles_x;
    const int64_t slots = std::max<int64_t>(1, current_device().threads);
    // Blocks of up to winograd_micro_rows micro-rows (8 on Zen 4, the GEMM drivers' row block) of
    // F(2×2) tiles, and of F(4×4) tiles as many as hold about as many transformed rows (16/36 of
    // them), as many blocks as a multiple of the thread count so that the threads finish together.
    const int64_t micro_rows = std::max<int64_t>(1, (kernel_tuning().winograd_micro_rows * 16 + kP - 1) / kP);
    const int64_t block_rows = micro_rows * mr_;
    int64_t blocks = (tiles + block_rows - 1) / block_rows;
    blocks = (blocks + slots - 1) / slots * slots;
    rows_ = ((tiles + blocks - 1) / blocks + mr_ - 1) / mr_ * mr_;
    blocks = (tiles + rows_ - 1) / rows_;

    const size_t v_floats = static_cast<size_t>(kP * (bf16_ ? 1 : rows_) * ldv_);
    const size_t v16_halves = bf16_ ? static_cast<size_t>(halves_ * kP * rows_ * ldv16_) : 0;
    const size_t m_floats = static_cast<size_t>(kP * rows_ * ldm_);
    const size_t per_slot = (v_floats + m_floats + static_cast<size_t>(g_.Ci)) * sizeof(float) +
                            (v16_halves * sizeof(uint16_t) + 63) / 64 * 64;
    const CallScratch buffer(per_slot * static_cast<size_t>(slots));
    char* base = buffer.get<char>();
    parallel_for(slots, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        char* p = base + per_slot * s;
        Scratch sc;
        sc.v = reinterpret_cast<float*>(p);
        sc.m = sc.v + v_floats;
        float* zeros = sc.m + m_floats;
        std::memset(zeros, 0, static_cast<size_t>(g_.Ci) * sizeof(float));
        sc.zeros = zeros;
        sc.v16 = bf16_ ? reinterpret_cast<uint16_t*>(zeros + g_.Ci) : nullptr;
        for (int64_t b = s; b < blocks; b += slots) {
          const int64_t t0 = b * rows_, count = std::min(rows_, tiles - t0);
          transform_in(sc, t0, count);
          multiply(sc, count);
          transform_out(sc, t0, count);
        }
      }
    });
  }

 private:
  void tile_position(int64_t t, int64_t* n, int64_t* ty, int64_t* tx) const {
    *tx = t % g_.tiles_x;
    *ty = (t / g_.tiles_x) % g_.tiles_y;
    *n = t / (g_.tiles_x * g_.tiles_y);
  }

  void transform_in(const Scratch& sc, int64_t t0, int64_t count) const {
    for (int64_t r = 0; r < count; ++r) {
      int64_t n, ty, tx;
      tile_position(t0 + r, &n, &ty, &tx);
      const float* d[kP];
      for (int i = 0; i < kAlpha; ++i)
        for (int j = 0; j < kAlpha; ++j) {
          const int64_t iy = kM * ty - 1 + i, ix = kM * tx - 1 + j;
          const bool inside = iy >= 0 && iy < g_.H && ix >= 0 && ix < g_.W;
          d[i * kAlpha + j] = inside ? x_ + ((n * g_.H + iy) * g_.W + ix) * g_.Ci : sc.zeros;
        }
      // f32: straight into the block's rows; bf16: through one tile's f32 rows (sc.v), rounded.
      float* v[kP];
      for (int p = 0; p < kP; ++p) v[p] = bf16_ ? sc.v + p * ldv_ : sc.v + (p * rows_ + r) * ldv_;
      for (int64_t c = 0; c < g_.Ci; c += kLanes) Tile::input(d, c, v);
      if (bf16_)
        for (int p = 0; p < kP; ++p) convert_(v[p], g_.Ci, sc.v16 + (p * rows_ + r) * ldv16_);
      if (halves_ == 2)  // Split activations: the low halves after the high ones (gemm.h)
        for (int p = 0; p < kP; ++p) convert_low_(v[p], g_.Ci, sc.v16 + ((kP + p) * rows_ + r) * ldv16_);
    }
  }

  // M_p = V_p · U_p for the α² positions, K in the GEMM drivers' fixed chunks. U_p is rows
  // p·Ci … p·Ci+Ci−1 of every panel of the packed weight.
  void multiply(const Scratch& sc, int64_t count) const {
    const int64_t Ci = g_.Ci, Co = g_.Co, K = kP * Ci;
    const int64_t kc_max = bf16_ ? chunk_size_bf16(Ci) : chunk_size_f32(Ci);
    for (int p = 0; p < kP; ++p) {
      float* m = sc.m + p * rows_ * ldm_;
      for (int64_t k0 = 0; k0 < Ci; k0 += kc_max) {
        const int64_t kc = std::min(kc_max, Ci - k0);
        if (bf16_) {
          for (int half = 0; half < halves_; ++half)
            block_gemm_bf16(mk16_, sc.v16 + (half * kP + p) * rows_ * ldv16_ + k0, ldv16_, count, kc / 2,
                            w_.packed.bf16_data() + (p * Ci + k0) / 2 * kPairRow, bf16_pairs(K) * kPairRow, Co,
                            m, ldm_, k0 > 0 || half > 0);
        } else {
          block_gemm(mk_, sc.v + p * rows_ * ldv_ + k0, ldv_, count, kc, w_.packed.data() + (p * Ci + k0) * kPanel,
                     K * kPanel, Co, m, ldm_, k0 > 0);
        }
      }
    }
  }

  void transform_out(const Scratch& sc, int64_t t0, int64_t count) const {
    const int64_t Co = g_.Co;
    const float* bias = w_.bias.empty() ? nullptr : w_.bias.data();
    for (int64_t r = 0; r < count; ++r) {
      int64_t n, ty, tx;
      tile_position(t0 + r, &n, &ty, &tx);
      const float* m[kP];
      for (int p = 0; p < kP; ++p) m[p] = sc.m + (p * rows_ + r) * ldm_;
      const int64_t rows = std::min<int64_t>(kM, g_.H - kM * ty), cols = std::min<int64_t>(kM, g_.W - kM * tx);
      for (int64_t c = 0; c < Co; c += kLanes) {
        Lanes out[kM][kM];
        Tile::output(m, c, out);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t at = ((n * g_.H + kM * ty + i) * g_.W + kM * tx + j) * Co + c;
            Lanes v = out[i][j];
            if (bias) v += load(bias + c);  // (Σ + bias) + residual, as the GEMM epilogue
            if (residual_) v += load(residual_ + at);
            if (relu_) v = v < 0.0f ? Lanes{} : v;  // kernels::relu's a < 0 ? 0 : a, lane by lane
            store(y_ + at, v);
          }
      }
    }
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
  int halves_ = 1;
  int64_t mr_ = 1, ldv_ = 0, ldv16_ = 0, ldm_ = 0, rows_ = 0;
};

// U = G g Gᵀ per (co, ci), in double, stored as pack_b's transposed input: row co, column
// p·Ci + ci.
template <typename Tile>
void weight_rows(const float* w, int64_t Ci, int64_t co0, int64_t n, float* dst) {
  constexpr int kAlpha = Tile::alpha;
  for (int64_t r = 0; r < n; ++r) {
    float* row = dst + r * Tile::positions * Ci;
    for (int64_t ci = 0; ci < Ci; ++ci) {
      const float* g = w + ((co0 + r) * Ci + ci) * 9;
      double gg[kAlpha][3];  // G g
      for (int i = 0; i < kAlpha; ++i)
        for (int j = 0; j < 3; ++j)
          gg[i][j] = Tile::G[i][0] * g[j] + Tile::G[i][1] * g[3 + j] + Tile::G[i][2] * g[6 + j];
      for (int i = 0; i < kAlpha; ++i)
        for (int j = 0; j < kAlpha; ++j)
          row[(i * kAlpha + j) * Ci + ci] =
              static_cast<float>(gg[i][0] * Tile::G[j][0] + gg[i][1] * Tile::G[j][1] + gg[i][2] * Tile::G[j][2]);
    }
  }
}

}  // namespace

int winograd_positions(ConvAlgorithm algorithm) {
  return algorithm == ConvAlgorithm::Winograd4x4 ? F4x4::positions : F2x2::positions;
}

void winograd_weight_rows(ConvAlgorithm algorithm, const float* w, int64_t Ci, int64_t co0, int64_t n, float* dst) {
  if (algorithm == ConvAlgorithm::Winograd4x4) return weight_rows<F4x4>(w, Ci, co0, n, dst);
  weight_rows<F2x2>(w, Ci, co0, n, dst);
}

void conv2d_winograd(const float* x, int64_t N, int64_t H, int64_t W, const Conv2dWeights& w, float* y,
                     const float* residual, bool relu) {
  const int64_t Ci = w.in_channels, Co = w.out_channels;
  const int positions = winograd_positions(w.algorithm);
  if (Ci % kLanes != 0 || Co % kLanes != 0 || w.packed.K() != positions * Ci || w.packed.N() != Co)
    fail(cat("internal: Winograd weight ", Co, "x", Ci, " packed as ", w.packed.K(), "x", w.packed.N()));
  if (w.algorithm == ConvAlgorithm::Winograd4x4) {
    if (w.packed.precision() != Precision::F32) fail("internal: a Winograd F(4x4, 3x3) weight packed as bf16");
    const Geometry g{N, H, W, Ci, Co, (H + 3) / 4, (W + 3) / 4};
    return WinogradConv<F4x4>(x, g, w, y, residual, relu).run();
  }
  const Geometry g{N, H, W, Ci, Co, (H + 1) / 2, (W + 1) / 2};
  WinogradConv<F2x2>(x, g, w, y, residual, relu).run();
}

}  // namespace octodiff::kernels::detail
