// Flash attention with a key tile's scores held in columns (Sᵀ = K·Qᵀ: keys are the micro-kernel's
// rows, 32 queries a panel), shared by the float32 and bf16 products (attention.cpp,
// attention_bf16.cpp). Sᵀ lands in the packed-B layout, so the probabilities feed Oᵀ += Vᵀ·P with
// no repacking (bf16: pairs of keys interleaved); the softmax runs down the columns
// (VecMath::softmax_columns: no horizontal reductions, the rescaling a vector per row of Oᵀ); the
// output's rows are the head dimension, so a head of 40 costs 40 rows, not 32 + 16 columns.
// Every query is computed by one thread in a fixed key order: no dependence on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/memory.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels::detail {

// n floats, 64-byte aligned, uninitialised.
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t n)
      : p_(static_cast<float*>(
            aligned_alloc_or_throw(static_cast<size_t>(std::max<int64_t>(n, 16)) * sizeof(float)))) {}
  ~AlignedFloats() { aligned_free(p_); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_;
};

// Products supplies, for one head: mr(); pack_queries(q, ldq, i0, br) (the Qᵀ panels);
// scores(key, rows, p, cols, s) (Sᵀ rows key … key + rows − 1 of panel p into s, row stride 32);
// probabilities(p, s, nc) (panel p's probabilities as the B of P·V); accumulate(p, s, j0, nc, c0,
// rows, cols, o, load) (Oᵀ rows c0 … c0 + rows − 1 of panel p += Vᵀ·P over keys j0 … j0 + nc − 1).
template <class Products>
class ColumnBlock {
 public:
  using SoftmaxColumns = decltype(VecMath::softmax_columns);
  ColumnBlock(Products& products, int64_t d, int64_t Br, int64_t Bc,
              SoftmaxColumns softmax = vec_math(kernel_isa()).softmax_columns)
      : products_(products),
        softmax_(softmax),
        d_(d),
        Bc_(Bc),
        s_(Br / kPanel * Bc * kPanel),
        o_(Br / kPanel * d * kPanel),
        m_(Br),
        l_(Br),
        alpha_(Br),
        valid_(Br) {}

  // Queries [i0, i0 + br) of the head, q and out at its first column; keys [0, kend).
  void run(const float* q, int64_t ldq, float* out, int64_t ldo, int64_t i0, int64_t br, int64_t kend,
           float scale, bool causal) {
    const int64_t d = d_, np = (br + kPanel - 1) / kPanel, mr = products_.mr();
    auto cols = [&](int64_t p) { return static_cast<int>(std::min<int64_t>(kPanel, br - p * kPanel)); };
    products_.pack_queries(q, ldq, i0, br);
    std::fill(m_.begin(), m_.end(), -std::numeric_limits<float>::infinity());
    std::fill(l_.begin(), l_.end(), 0.0f);
    for (int64_t j0 = 0; j0 < kend; j0 += Bc_) {
      const int64_t nc = std::min(Bc_, kend - j0);
      for (int64_t j = 0; j < nc; j += mr)
        for (int64_t p = 0; p < np; ++p)
          products_.scores(j0 + j, static_cast<int>(std::min(mr, nc - j)), p, cols(p), panel(p) + j * kPanel);
      if (causal)  // query i0 + i sees keys j0 … i0 + i
        for (int64_t i = 0; i < br; ++i)
          valid_[i] = static_cast<int32_t>(std::clamp<int64_t>(i0 + i - j0 + 1, 0, nc));
      for (int64_t p = 0; p < np; ++p) {
        softmax_(panel(p), static_cast<int>(nc), cols(p), scale, &m_[p * kPanel], &l_[p * kPanel],
                 &alpha_[p * kPanel], causal ? &valid_[p * kPanel] : nullptr);
        products_.probabilities(p, panel(p), static_cast<int>(nc));
        float* o = o_.get() + p * d * kPanel;
        if (j0 > 0)  // the first tile's P·V overwrites Oᵀ
          for (int64_t c = 0; c < d; ++c)
            for (int i = 0; i < cols(p); ++i) o[c * kPanel + i] *= alpha_[p * kPanel + i];
        for (int64_t c0 = 0; c0 < d; c0 += mr)
          products_.accumulate(p, panel(p), j0, static_cast<int>(nc), c0,
                               static_cast<int>(std::min(mr, d - c0)), cols(p), o + c0 * kPanel, j0 > 0);
      }
    }
    for (int64_t i = 0; i < br; ++i) {
      const float* o = o_.get() + (i / kPanel) * d * kPanel + i % kPanel;
      for (int64_t c = 0; c < d; ++c) out[(i0 + i) * ldo + c] = o[c * kPanel] / l_[i];
    }
  }

 private:
  float* panel(int64_t p) { return s_.get() + p * Bc_ * kPanel; }

  Products& products_;
  const SoftmaxColumns softmax_;
  int64_t d_, Bc_;
  AlignedFloats s_, o_;  // Sᵀ/P panels (Bc × 32 each), Oᵀ panels (d × 32)
  std::vector<float> m_, l_, alpha_;
  std::vector<int32_t> valid_;
};

// The key tile in whole micro-rows (attention_key_tile rounded down), the query block in panels
// of 32 (attention_query_micro_rows / 2: Zen 4's 4 → 64 queries).
inline int64_t column_key_tile(int64_t mr) {
  return std::max<int64_t>(mr, kernel_tuning().attention_key_tile / mr * mr);
}
inline int64_t column_query_block() {
  return kPanel * std::max<int64_t>(1, kernel_tuning().attention_query_micro_rows / 2);
}
// Vᵀ's row stride: past the keys, one cache line longer than whole 64-byte lines (4096 keys would
// put the micro-kernel's rows 16 KiB apart, all in one L1 set).
inline int64_t column_vt_stride(int64_t keys) {
  return (keys + 15) / 16 * 16 + 16;
}

// The drivers' common loop (attention.cpp, attention_bf16.cpp) on a shape with every stride
// resolved: (batch, head) pairs in groups whose packed K and V (kv_size floats each: Vᵀ in d rows
// of stride column_vt_stride(), then K's rows) take at most 8 MiB; per group each pair is packed
// by pack(b, h, dst), then its query blocks run through a ColumnBlock on make_products(Br).
template <class MakeProducts, class Pack>
void run_by_columns(const float* q, float* out, const AttentionShape& s, float scale, bool causal, int64_t Bc,
                    int64_t kv_size, MakeProducts make_products, Pack pack,
                    decltype(VecMath::softmax_columns) softmax) {
  const int64_t d = s.head_dim, H = s.heads, Lq = s.q_len, Lk = s.kv_len, pairs = s.batch * H;
  const int64_t Br = column_query_block(), q_blocks = (Lq + Br - 1) / Br, ldvt = column_vt_stride(Lk);
  const int64_t group =
      std::clamp<int64_t>((int64_t{8} << 20) / (kv_size * static_cast<int64_t>(sizeof(float))), 1, pairs);
  const CallScratch kv_buffer(static_cast<size_t>(group * kv_size) * sizeof(float));
  float* const kv_packed = kv_buffer.get<float>();
  for (int64_t g0 = 0; g0 < pairs; g0 += group) {
    const int64_t gn = std::min(group, pairs - g0);
    parallel_for(gn, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) pack((g0 + t) / H, (g0 + t) % H, kv_packed + t * kv_size);
    });
    parallel_for(gn * q_blocks, [&](int64_t t0, int64_t t1) {
      auto products = make_products(Br);
      ColumnBlock<decltype(products)> block(products, d, Br, Bc, softmax);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t gi = t / q_blocks, b = (g0 + gi) / H, h = (g0 + gi) % H;
        const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
        const float* vt = kv_packed + gi * kv_size;
        products.set_head(vt + d * ldvt, vt, ldvt);
        block.run(q + b * s.batch_stride_q + h * d, s.ldq, out + b * s.batch_stride_o + h * d, s.ldo, i0, br,
                  causal ? std::min(Lk, i0 + br) : Lk, scale, causal);
      }
    });
  }
}

}  // namespace octodiff::kernels::detail
