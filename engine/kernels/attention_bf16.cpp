// Flash attention in bf16: the structure of attention.cpp with both products on the bf16
// micro-kernels.
//
// Per (batch, head) K is packed once as bf16 Kᵀ panels (pairs of the head dimension
// interleaved) and V as bf16 panels (pairs of keys interleaved). A block of query rows is
// rounded to bf16 once; for each key tile S = Q·Kᵀ lands in float32, the online softmax runs in
// float32 and writes the probabilities P as bf16, and O += P·V accumulates in float32. The
// running sum l adds the float32 probabilities. Every query row is computed by one thread in a
// fixed key order, so results do not depend on the thread count.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "kernels/attention_columns.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels::detail {
namespace {

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// bf16 products of one head for ColumnBlock on the widened micro-kernel (FMA on bf16 values as
// float32): K's rows rounded and widened side by side (stride 2·⌈d/2⌉, zero-padded), Vᵀ the
// same (d rows of stride ldvt, zero past the keys); per query block Qᵀ as bf16 pair panels (pairs
// of the head dimension), per key tile P as bf16 pair panels (pairs of keys).
class WideProducts {
 public:
  WideProducts(const MicroKernelBf16& mk, int64_t d, int64_t Br, int64_t Bc, ToBf16Fn convert)
      : mk_(mk),
        d_(d),
        d2_(bf16_pairs(d)),
        Bc_(Bc),
        convert_(convert),
        q_(Br / kPanel * bf16_pairs(d) * kPairRow / 2),
        p_(Br / kPanel * Bc * kPanel / 2),
        row_(2 * bf16_pairs(d)) {}
  void set_head(const float* k, const float* vt, int64_t ldvt) { k_ = k, vt_ = vt, ldvt_ = ldvt; }
  int64_t mr() const { return mk_.mr; }

  void pack_queries(const float* q, int64_t ldq, int64_t i0, int64_t br) {  // zero past br and d
    uint16_t* dst = reinterpret_cast<uint16_t*>(q_.get());
    std::fill(dst, dst + (br + kPanel - 1) / kPanel * d2_ * kPairRow, uint16_t{0});
    for (int64_t i = 0; i < br; ++i) {
      convert_(q + (i0 + i) * ldq, d_, row_.data());
      uint16_t* panel = dst + (i / kPanel) * d2_ * kPairRow + 2 * (i % kPanel);
      for (int64_t c = 0; c < d_; ++c) panel[(c / 2) * kPairRow + c % 2] = row_[c];
    }
  }
  void scores(int64_t key, int rows, int64_t p, int cols, float* s) const {
    mk_.wide(d2_, k_ + key * 2 * d2_, 2 * d2_, q16() + p * d2_ * kPairRow, s, kPanel, rows, cols, false,
             TileEpilogue{});
  }
  void probabilities(int64_t p, const float* s, int nc) {
    pack_probability_pairs_avx512(s, nc, p16() + p * Bc_ * kPanel);
  }
  void accumulate(int64_t p, const float*, int64_t j0, int nc, int64_t c0, int rows, int cols, float* o,
                  bool load) const {
    mk_.wide((nc + 1) / 2, vt_ + c0 * ldvt_ + j0, ldvt_, p16() + p * Bc_ * kPanel, o, kPanel, rows, cols,
             load, TileEpilogue{});
  }

 private:
  const uint16_t* q16() const { return reinterpret_cast<const uint16_t*>(q_.get()); }
  uint16_t* p16() const { return reinterpret_cast<uint16_t*>(p_.get()); }

  const MicroKernelBf16& mk_;
  int64_t d_, d2_, Bc_;
  ToBf16Fn convert_;
  AlignedFloats q_, p_;  // bf16 storage: Qᵀ pair panels, P pair panels (Bc/2 pair-rows each)
  std::vector<uint16_t> row_;
  const float *k_ = nullptr, *vt_ = nullptr;
  int64_t ldvt_ = 0;
};

// float32 of a bf16 value.
inline float widened(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Score columns (attention_columns.h) on the widened bf16 micro-kernel: where the CPU has the
// BF16 instructions (P's rounding) but multiplies with FMA, for the shapes attention.cpp chooses.
void attention_bf16_by_columns(const float* q, const float* k, const float* v, float* out,
                               const AttentionShape& s, float scale, bool causal) {
  const int64_t d = s.head_dim, Lk = s.kv_len, d2 = bf16_pairs(d);
  const MicroKernelBf16 mk = micro_kernel_bf16(kernel_isa());
  const ToBf16Fn convert = to_bf16_fn(kernel_isa(), true);
  const int64_t Bc = column_key_tile(mk.mr), ldvt = column_vt_stride(Lk);
  auto pack = [&](int64_t b, int64_t h, float* vt) {  // rounded and widened; zero past the keys and d
    std::vector<uint16_t> row(2 * d2);
    float* kw = vt + d * ldvt;
    for (int64_t c = 0; c < d; ++c) std::fill(vt + c * ldvt + Lk, vt + (c + 1) * ldvt, 0.0f);
    for (int64_t j = 0; j < Lk; ++j) {
      convert(v + b * s.batch_stride_v + j * s.ldv + h * d, d, row.data());
      for (int64_t c = 0; c < d; ++c) vt[c * ldvt + j] = widened(row[c]);
      convert(k + b * s.batch_stride_k + j * s.ldk + h * d, d, row.data());
      for (int64_t c = 0; c < 2 * d2; ++c) kw[j * 2 * d2 + c] = c < d ? widened(row[c]) : 0.0f;
    }
  };
  run_by_columns(
      q, out, s, scale, causal, Bc, d * ldvt + Lk * 2 * d2,
      [&](int64_t Br) { return WideProducts(mk, d, Br, Bc, convert); }, pack, &softmax_columns_base2_avx512);
}

}  // namespace

void attention_bf16(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                    float scale, bool causal) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  const Isa isa = kernel_isa();
  const MicroKernelBf16 mk = micro_kernel_bf16(isa);
  if (mk.wide && kernel_bf16_instructions() && attention_by_columns_chosen(s))
    return attention_bf16_by_columns(q, k, v, out, s, scale, causal);
  // Rounding by VCVTNEPS2BF16 and the base-2 softmax wherever the BF16 instructions exist, also
  // when the products run on widened values (that softmax's exp costs half of the portable one's).
  const bool bf16_instructions = kernel_bf16_instructions();
  const ToBf16Fn convert = to_bf16_fn(isa, bf16_instructions);
  const auto softmax_update =
      bf16_instructions ? &softmax_update_bf16_avx512_dot : vec_math(isa).softmax_update_bf16;
  const int64_t C = H * d, d2 = bf16_pairs(d), Lk2 = bf16_pairs(Lk);
  const int64_t Lkp = round_up(Lk, kPanel), dp = round_up(d, kPanel);
  const int64_t k_size = (Lkp / kPanel) * d2 * kPairRow;  // bf16 elements per (batch, head)
  const int64_t v_size = (dp / kPanel) * Lk2 * kPairRow;
  const int64_t ldq = 2 * d2;  // bf16 Q rows, zero-padded to whole pairs
  const int64_t q_size = Lq * ldq;

  // Packing reads whole rows (all heads; strided per-head slices would wait on memory), rounds
  // them to bf16 once and writes every element of the packed layouts, padding included.
  const CallScratch buffer(static_cast<size_t>(B * H * (k_size + v_size + q_size)) * sizeof(uint16_t));
  uint16_t* const packed = buffer.get<uint16_t>();
  auto k_packed = [&](int64_t b, int64_t h) { return packed + (b * H + h) * (k_size + v_size); };
  auto q_packed = [&](int64_t b, int64_t h) {
    return packed + B * H * (k_size + v_size) + (b * H + h) * q_size;
  };
  const int64_t key_blocks = Lkp / kPanel, q_row_blocks = (Lq + kPanel - 1) / kPanel;
  parallel_for(B * (key_blocks + q_row_blocks), [&](int64_t t0, int64_t t1) {
    thread_local ThreadBuffer rows_buffer;
    uint16_t* rows = rows_buffer.get<uint16_t>(2 * kPanel * C);  // kPanel rows of K and of V
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (key_blocks + q_row_blocks), blk = t % (key_blocks + q_row_blocks);
      if (blk >= key_blocks) {  // a block of Q rows → each head's [Lq × ldq] matrix
        const int64_t i0 = (blk - key_blocks) * kPanel, n = std::min<int64_t>(kPanel, Lq - i0);
        for (int64_t i = 0; i < n; ++i) {
          convert(q + b * s.batch_stride_q + (i0 + i) * s.ldq, C, rows);
          for (int64_t h = 0; h < H; ++h) {
            uint16_t* dst = q_packed(b, h) + (i0 + i) * ldq;
            std::memcpy(dst, rows + h * d, d * sizeof(uint16_t));
            if (d % 2) dst[d] = 0;
          }
        }
        continue;
      }
      // Keys [j0, j0 + kPanel): one Kᵀ panel and kPanel/2 pair-rows of each V panel, per head.
      const int64_t j0 = blk * kPanel, n = std::min<int64_t>(kPanel, Lk - j0);
      uint16_t* kr = rows;
      uint16_t* vr = rows + kPanel * C;
      for (int64_t j = 0; j < kPanel; ++j) {
        if (j < n) {
          convert(k + b * s.batch_stride_k + (j0 + j) * s.ldk, C, kr + j * C);
          convert(v + b * s.batch_stride_v + (j0 + j) * s.ldv, C, vr + j * C);
        } else {
          std::memset(kr + j * C, 0, C * sizeof(uint16_t));
          std::memset(vr + j * C, 0, C * sizeof(uint16_t));
        }
      }
      auto at = [](const uint16_t* row, int64_t c, int64_t limit) -> uint32_t {
        return c < limit ? row[c] : 0;
      };
      for (int64_t h = 0; h < H; ++h) {
        uint32_t* kd = reinterpret_cast<uint32_t*>(k_packed(b, h) + blk * d2 * kPairRow);
        for (int64_t pr = 0; pr < d2; ++pr)  // pair-row pr of the panel: (k[j][2pr], k[j][2pr+1]) per key
          for (int64_t j = 0; j < kPanel; ++j) {
            const uint16_t* row = kr + j * C + h * d;
            kd[pr * kPanel + j] = at(row, 2 * pr, d) | at(row, 2 * pr + 1, d) << 16;
          }
        uint16_t* vp = k_packed(b, h) + k_size;
        const int64_t pairs = std::min<int64_t>(kPanel / 2, Lk2 - j0 / 2);
        for (int64_t dpn = 0; dpn < dp / kPanel; ++dpn) {
          uint32_t* vd = reinterpret_cast<uint32_t*>(vp + dpn * Lk2 * kPairRow + (j0 / 2) * kPairRow);
          for (int64_t pr = 0; pr < pairs; ++pr) {  // keys j0+2pr, j0+2pr+1 of columns dpn·32 + col
            const uint16_t* even = vr + (2 * pr) * C + h * d;
            const uint16_t* odd = even + C;
            for (int64_t col = 0; col < kPanel; ++col) {
              const int64_t c = dpn * kPanel + col;
              vd[pr * kPanel + col] = at(even, c, d) | at(odd, c, d) << 16;
            }
          }
        }
      }
    }
  });

  // As attention.cpp: Br × Bc score tiles from kernel_tuning(); Bc a multiple of kPanel, so key
  // tiles start on a pair.
  const int64_t Br = mk.mr * kernel_tuning().attention_query_micro_rows;
  const int64_t Bc = std::min(kernel_tuning().attention_key_tile, Lkp);
  const int64_t q_blocks = (Lq + Br - 1) / Br;
  const float ninf = -std::numeric_limits<float>::infinity();

  parallel_for(B * H * q_blocks, [&](int64_t t0, int64_t t1) {
    thread_local ThreadBuffer work;
    float* S = work.get<float>(Br * Bc + Br * dp + Br * Bc / 2);
    float* O = S + Br * Bc;
    uint16_t* P = reinterpret_cast<uint16_t*>(O + Br * dp);  // Br × Bc
    std::vector<float> m(Br), l(Br);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / q_blocks, b = bh / H, h = bh % H;
      const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
      const uint16_t* kp = k_packed(b, h);
      const uint16_t* vp = kp + k_size;
      const uint16_t* Q = q_packed(b, h) + i0 * ldq;
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t kend = causal ? std::min(Lk, i0 + br) : Lk;
      for (int64_t j0 = 0; j0 < kend; j0 += Bc) {
        const int64_t nc = std::min(Bc, kend - j0), nc2 = round_up(nc, 2);
        block_gemm_bf16(mk, Q, ldq, br, d2, kp + (j0 / kPanel) * d2 * kPairRow, d2 * kPairRow, nc, S, Bc,
                        false);
        for (int64_t r = 0; r < br; ++r) {
          float* sr = S + r * Bc;
          uint16_t* pr = P + r * Bc;
          const int64_t valid = causal ? std::min(nc, i0 + r - j0 + 1) : nc;
          if (valid <= 0) {
            std::fill(pr, pr + nc2, uint16_t{0});
            continue;
          }
          const float alpha = softmax_update(sr, static_cast<int>(valid), scale, &m[r], &l[r], pr);
          std::fill(pr + valid, pr + nc2, uint16_t{0});
          if (alpha != 1.0f && j0 > 0) {  // the first tile's P·V overwrites O
            float* o = O + r * dp;
            for (int64_t c = 0; c < d; ++c) o[c] *= alpha;
          }
        }
        block_gemm_bf16(mk, P, Bc, br, nc2 / 2, vp + (j0 / 2) * kPairRow, Lk2 * kPairRow, d, O, dp, j0 > 0);
      }
      for (int64_t r = 0; r < br; ++r) {
        float* dst = out + b * s.batch_stride_o + (i0 + r) * s.ldo + h * d;
        const float* o = O + r * dp;
        const float lr = l[r];
        for (int64_t c = 0; c < d; ++c) dst[c] = o[c] / lr;
      }
    }
  });
}

}  // namespace octodiff::kernels::detail
