// Flash attention on the GEMM micro-kernels.
//
// Per (batch, head) the keys are packed once as Kᵀ panels (d × keys) and the values as V panels
// (keys × d). A block of query rows then walks the keys in tiles: S = Q·Kᵀ for the tile, an
// online-softmax update per row (running max m and sum l; the output row is rescaled when m
// grows), and O += P·V. Only a Br × Bc score tile per thread exists at any time. Every query row
// is computed by one thread in a fixed key order, so results do not depend on the thread count.
#include "kernels/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {
namespace {

using detail::kPanel;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct AlignedBuffer {
  explicit AlignedBuffer(int64_t n)
      : p(static_cast<float*>(aligned_alloc_or_throw(static_cast<size_t>(std::max<int64_t>(n, 16)) * sizeof(float)))) {}
  ~AlignedBuffer() { aligned_free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  float* p;
};

// Row and batch strides, zeros resolved.
struct Strides {
  int64_t ldq, ldk, ldv, ldo, bsq, bsk, bsv, bso;
};

void attention_by_rows(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                       const Strides& st, float scale, bool causal);
void attention_by_columns(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                          const Strides& st, float scale, bool causal);

}  // namespace

void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
               float scale, bool causal, Precision precision) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  if (d <= 0 || H <= 0 || B <= 0 || Lq < 0 || Lk <= 0)
    fail(cat("attention: bad shape batch ", B, " heads ", H, " head_dim ", d, " q_len ", Lq, " kv_len ", Lk));
  if (Lq == 0) return;
  const int64_t ldq = s.ldq ? s.ldq : H * d, ldk = s.ldk ? s.ldk : H * d;
  const int64_t ldv = s.ldv ? s.ldv : H * d, ldo = s.ldo ? s.ldo : H * d;
  if (ldq < H * d || ldk < H * d || ldv < H * d || ldo < H * d) fail("attention: a row stride is below heads × head_dim");
  const int64_t bsq = s.batch_stride_q ? s.batch_stride_q : Lq * ldq;
  const int64_t bsk = s.batch_stride_k ? s.batch_stride_k : Lk * ldk;
  const int64_t bsv = s.batch_stride_v ? s.batch_stride_v : Lk * ldv;
  const int64_t bso = s.batch_stride_o ? s.batch_stride_o : Lq * ldo;
  if (precision == Precision::BF16 && bf16_activations() == Bf16Activations::Rounded) {
    AttentionShape full = s;
    full.ldq = ldq, full.ldk = ldk, full.ldv = ldv, full.ldo = ldo;
    full.batch_stride_q = bsq, full.batch_stride_k = bsk, full.batch_stride_v = bsv,
    full.batch_stride_o = bso;
    return detail::attention_bf16(q, k, v, out, full, scale, causal);
  }
  const Strides st{ldq, ldk, ldv, ldo, bsq, bsk, bsv, bso};
  if (detail::attention_by_columns_chosen(s))
    attention_by_columns(q, k, v, out, s, st, scale, causal);
  else
    attention_by_rows(q, k, v, out, s, st, scale, causal);
}

// Score columns where they paid, paired on Emerald Rapids (bench/results "Attention in score
// columns"; kernel_tuning() turns them on there only): head dims above one panel that are not
// whole panels — SD 1.5's self-attention, 4096 keys × 40 ×1.07–1.13, 1024 × 80 ×1.02–1.04 (the
// bench's 4096 × 80, not an SD shape: ×0.95–1.08) — where score rows compute P·V on 48 or 96
// columns; not for 64, 160 or 512 (rows ×1.03–1.10 faster) nor for short key rows (77 text
// tokens: rows ×1.05). Head dims under 32 (the tiny test models' 8) were not measured: rows.
bool detail::attention_by_columns_chosen(const AttentionShape& s) {
  return kernel_tuning().attention_columns && vec_math(kernel_isa()).softmax_columns && s.head_dim > kPanel &&
         s.head_dim % kPanel != 0 && s.kv_len >= 256;
}

namespace {

// Score rows (S = Q·Kᵀ, queries × keys): the ISAs without VecMath::softmax_columns.
void attention_by_rows(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                       const Strides& st, float scale, bool causal) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  const auto [ldq, ldk, ldv, ldo, bsq, bsk, bsv, bso] = st;
  const detail::MicroKernel mk = detail::micro_kernel(kernel_isa());
  const auto softmax_update = detail::vec_math(kernel_isa()).softmax_update;
  const int64_t Lkp = round_up(Lk, kPanel), dp = round_up(d, kPanel);
  const int64_t k_size = Lkp * d, v_size = dp * Lk;  // floats per (batch, head)

  // (batch, head) pairs in groups whose packed K/V take at most kGroupBytes (one pair at least):
  // all 16 pairs of a guided step's 4096-token self-attention would hold 27 MB of arena scratch
  // at the activations' peak. A pair's arithmetic does not depend on its group.
  constexpr int64_t kGroupBytes = int64_t{8} << 20;
  const int64_t pairs = B * H;
  const int64_t group =
      std::clamp<int64_t>(kGroupBytes / ((k_size + v_size) * static_cast<int64_t>(sizeof(float))), 1, pairs);
  const detail::CallScratch kv_buffer(static_cast<size_t>(group * (k_size + v_size)) * sizeof(float));
  float* const kv_packed = kv_buffer.get<float>();
  // Br × Bc score tiles (kernel_tuning(): 4 micro-rows × 256 keys on Zen 4; Bc a multiple of
  // kPanel). The key tile fixes the order of the softmax updates, the query block does not.
  const int64_t Br = mk.mr * kernel_tuning().attention_query_micro_rows;
  const int64_t Bc = std::min(kernel_tuning().attention_key_tile, Lkp);
  const int64_t q_blocks = (Lq + Br - 1) / Br;
  const float ninf = -std::numeric_limits<float>::infinity();

  for (int64_t g0 = 0; g0 < pairs; g0 += group) {
    const int64_t gn = std::min(group, pairs - g0);
    // Pack K as Kᵀ panels and V as panels, per (batch, head) of the group.
    parallel_for(gn, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = (g0 + t) / H, h = (g0 + t) % H;
        float* kp = kv_packed + t * (k_size + v_size);
        float* vp = kp + k_size;
        for (int64_t j = 0; j < Lkp; ++j) {  // keys past Lk are zero columns of Kᵀ
          const float* kr = k + b * bsk + j * ldk + h * d;
          float* dst = kp + (j / kPanel) * d * kPanel + j % kPanel;
          for (int64_t c = 0; c < d; ++c) dst[c * kPanel] = j < Lk ? kr[c] : 0.0f;
        }
        for (int64_t j = 0; j < Lk; ++j) {  // columns past d are zero
          const float* vr = v + b * bsv + j * ldv + h * d;
          for (int64_t p = 0; p * kPanel < d; ++p) {
            float* dst = vp + p * Lk * kPanel + j * kPanel;
            const int64_t w = std::min<int64_t>(kPanel, d - p * kPanel);
            std::memcpy(dst, vr + p * kPanel, w * sizeof(float));
            std::fill(dst + w, dst + kPanel, 0.0f);
          }
        }
      }
    });

    parallel_for(gn * q_blocks, [&](int64_t t0, int64_t t1) {
      AlignedBuffer S(Br * Bc), O(Br * dp);
      std::vector<float> m(Br), l(Br);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t gi = t / q_blocks, b = (g0 + gi) / H, h = (g0 + gi) % H;
        const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
        const float* qb = q + b * bsq + i0 * ldq + h * d;
        const float* kp = kv_packed + gi * (k_size + v_size);
        const float* vp = kp + k_size;
        std::fill(O.p, O.p + Br * dp, 0.0f);
        std::fill(m.begin(), m.end(), ninf);
        std::fill(l.begin(), l.end(), 0.0f);
        const int64_t kend = causal ? std::min(Lk, i0 + br) : Lk;
        for (int64_t j0 = 0; j0 < kend; j0 += Bc) {
          const int64_t nc = std::min(Bc, kend - j0);
          detail::block_gemm(mk, qb, ldq, br, d, kp + (j0 / kPanel) * d * kPanel, d * kPanel, nc, S.p, Bc, false);
          for (int64_t r = 0; r < br; ++r) {
            float* sr = S.p + r * Bc;
            const int64_t valid = causal ? std::min(nc, i0 + r - j0 + 1) : nc;
            if (valid <= 0) {
              std::fill(sr, sr + nc, 0.0f);
              continue;
            }
            const float alpha = softmax_update(sr, static_cast<int>(valid), scale, &m[r], &l[r]);
            std::fill(sr + valid, sr + nc, 0.0f);
            if (alpha != 1.0f) {
              float* o = O.p + r * dp;
              for (int64_t c = 0; c < d; ++c) o[c] *= alpha;
            }
          }
          detail::block_gemm(mk, S.p, Bc, br, nc, vp + j0 * kPanel, Lk * kPanel, d, O.p, dp, true);
        }
        for (int64_t r = 0; r < br; ++r) {
          float* dst = out + b * bso + (i0 + r) * ldo + h * d;
          const float* o = O.p + r * dp;
          const float lr = l[r];
          for (int64_t c = 0; c < d; ++c) dst[c] = o[c] / lr;
        }
      }
    });
  }
}


// One block of queries of one (batch, head) in score columns: the buffers of a thread and the
// loop over key tiles (attention_by_columns).
class ColumnBlock {
 public:
  ColumnBlock(const detail::MicroKernel& mk, int64_t d, int64_t Br, int64_t Bc)
      : mk_(mk), d_(d), Bc_(Bc), np_max_(Br / kPanel), q_(np_max_ * d * kPanel), s_(np_max_ * Bc * kPanel),
        o_(np_max_ * d * kPanel), m_(Br), l_(Br), alpha_(Br), valid_(Br) {}

  // Queries [i0, i0 + br) of one head: q and out at the head's first column, k its keys' rows
  // (stride ldk), vt its Vᵀ (d rows of stride ldvt); keys [0, kend).
  void run(const float* q, int64_t ldq, const float* k, int64_t ldk, const float* vt, int64_t ldvt, float* out,
           int64_t ldo, int64_t i0, int64_t br, int64_t kend, float scale, bool causal) {
    const int64_t d = d_, np = (br + kPanel - 1) / kPanel;
    auto cols = [&](int64_t p) { return static_cast<int>(std::min<int64_t>(kPanel, br - p * kPanel)); };
    // Qᵀ panels: the micro-kernel's B for Sᵀ = K·Qᵀ, zero past br.
    std::fill(q_.p, q_.p + np * d * kPanel, 0.0f);
    for (int64_t i = 0; i < br; ++i)
      for (int64_t c = 0; c < d; ++c) q_.p[(i / kPanel) * d * kPanel + c * kPanel + i % kPanel] = q[(i0 + i) * ldq + c];
    std::fill(m_.begin(), m_.end(), -std::numeric_limits<float>::infinity());
    std::fill(l_.begin(), l_.end(), 0.0f);
    for (int64_t j0 = 0; j0 < kend; j0 += Bc_) {
      const int64_t nc = std::min(Bc_, kend - j0);
      for (int64_t j = 0; j < nc; j += mk_.mr)  // Sᵀ: rows are keys, one panel per 32 queries
        for (int64_t p = 0; p < np; ++p)
          mk_.fn(d, k + (j0 + j) * ldk, ldk, q_.p + p * d * kPanel, s_.p + p * Bc_ * kPanel + j * kPanel, kPanel,
                 static_cast<int>(std::min<int64_t>(mk_.mr, nc - j)), cols(p), false);
      if (causal)  // query i0 + i sees keys j0 … i0 + i
        for (int64_t i = 0; i < br; ++i) valid_[i] = static_cast<int32_t>(std::clamp<int64_t>(i0 + i - j0 + 1, 0, nc));
      for (int64_t p = 0; p < np; ++p)
        softmax_(s_.p + p * Bc_ * kPanel, static_cast<int>(nc), cols(p), scale, &m_[p * kPanel], &l_[p * kPanel],
                 &alpha_[p * kPanel], causal ? &valid_[p * kPanel] : nullptr);
      for (int64_t p = 0; p < np; ++p) {
        float* o = o_.p + p * d * kPanel;
        if (j0 > 0)  // the first tile's P·V overwrites Oᵀ
          for (int64_t c = 0; c < d; ++c)
            for (int i = 0; i < cols(p); ++i) o[c * kPanel + i] *= alpha_[p * kPanel + i];
        for (int64_t c0 = 0; c0 < d; c0 += mk_.mr)  // Oᵀ += Vᵀ·P: rows are the head dimension
          mk_.fn(nc, vt + c0 * ldvt + j0, ldvt, s_.p + p * Bc_ * kPanel, o + c0 * kPanel, kPanel,
                 static_cast<int>(std::min<int64_t>(mk_.mr, d - c0)), cols(p), j0 > 0);
      }
    }
    for (int64_t i = 0; i < br; ++i) {
      const float* o = o_.p + (i / kPanel) * d * kPanel + i % kPanel;
      for (int64_t c = 0; c < d; ++c) out[(i0 + i) * ldo + c] = o[c * kPanel] / l_[i];
    }
  }

 private:
  const detail::MicroKernel& mk_;
  const decltype(detail::VecMath::softmax_columns) softmax_ = detail::vec_math(kernel_isa()).softmax_columns;
  int64_t d_, Bc_, np_max_;
  AlignedBuffer q_, s_, o_;  // Qᵀ panels (d × 32 each), Sᵀ/P panels (Bc × 32), Oᵀ panels (d × 32)
  std::vector<float> m_, l_, alpha_;
  std::vector<int32_t> valid_;
};

// Score columns (Sᵀ = K·Qᵀ, keys × queries), for ISAs with VecMath::softmax_columns. Per (batch,
// head) V is packed once as Vᵀ (head_dim × keys) and K's rows of the head side by side (the
// micro-kernel's A, read in order: from where they lie, 4096 keys × 80 ran ×1.02–1.15 slower than
// score rows, packed ×0.95–1.08). For each key tile Sᵀ lands in panels of 32 queries, which is the packed B
// layout, so the probabilities feed Oᵀ += Vᵀ·P as they are; the softmax runs down the columns
// (no horizontal reductions), and the output's rows are the head dimension: head_dim 40 is 40
// rows of micro-tiles, not 32 + 16 columns. Every query is computed by one thread in a fixed key
// order, so results do not depend on the thread count.
void attention_by_columns(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                          const Strides& st, float scale, bool causal) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  const detail::MicroKernel mk = detail::micro_kernel(kernel_isa());
  // The key tile in whole micro-rows (attention_key_tile rounded down), the query block in
  // panels of 32 (attention_query_micro_rows / 2: Zen 4's 4 → 64 queries).
  const int64_t Bc = std::max<int64_t>(mk.mr, kernel_tuning().attention_key_tile / mk.mr * mk.mr);
  const int64_t Br = kPanel * std::max<int64_t>(1, kernel_tuning().attention_query_micro_rows / 2);
  // Vᵀ rows one cache line longer than whole 64-byte lines: 4096 keys would put the micro-kernel's
  // rows 16 KiB apart, all in one L1 set.
  const int64_t q_blocks = (Lq + Br - 1) / Br, ldvt = round_up(Lk, 16) + 16;
  const int64_t kv_size = d * ldvt + Lk * d;  // Vᵀ, then K's rows of the head side by side
  // (batch, head) pairs in groups whose packed K and V take at most 8 MiB, as attention_by_rows does.
  const int64_t pairs = B * H;
  const int64_t group =
      std::clamp<int64_t>((int64_t{8} << 20) / (kv_size * static_cast<int64_t>(sizeof(float))), 1, pairs);
  const detail::CallScratch kv_buffer(static_cast<size_t>(group * kv_size) * sizeof(float));
  float* const kv_packed = kv_buffer.get<float>();
  for (int64_t g0 = 0; g0 < pairs; g0 += group) {
    const int64_t gn = std::min(group, pairs - g0);
    parallel_for(gn, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = (g0 + t) / H, h = (g0 + t) % H;
        float* vt = kv_packed + t * kv_size;
        for (int64_t j = 0; j < Lk; ++j) {
          const float* vr = v + b * st.bsv + j * st.ldv + h * d;
          for (int64_t c = 0; c < d; ++c) vt[c * ldvt + j] = vr[c];
        }
        float* kh = vt + d * ldvt;
        for (int64_t j = 0; j < Lk; ++j) std::memcpy(kh + j * d, k + b * st.bsk + j * st.ldk + h * d, d * sizeof(float));
      }
    });
    parallel_for(gn * q_blocks, [&](int64_t t0, int64_t t1) {
      ColumnBlock block(mk, d, Br, Bc);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t gi = t / q_blocks, b = (g0 + gi) / H, h = (g0 + gi) % H;
        const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
        const float* vt = kv_packed + gi * kv_size;
        block.run(q + b * st.bsq + h * d, st.ldq, vt + d * ldvt, d, vt, ldvt,
                  out + b * st.bso + h * d, st.ldo, i0, br, causal ? std::min(Lk, i0 + br) : Lk, scale, causal);
      }
    });
  }
}
}  // namespace
}  // namespace octodiff::kernels
