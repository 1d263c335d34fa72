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
#include "kernels/attention_columns.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels {
namespace {

using detail::kPanel;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

void attention_by_rows(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                       float scale, bool causal);
void attention_by_columns(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                          float scale, bool causal);

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
  AttentionShape full = s;  // every stride resolved
  full.ldq = ldq, full.ldk = ldk, full.ldv = ldv, full.ldo = ldo;
  full.batch_stride_q = bsq, full.batch_stride_k = bsk, full.batch_stride_v = bsv, full.batch_stride_o = bso;
  if (precision == Precision::BF16 && bf16_activations() == Bf16Activations::Rounded)
    return detail::attention_bf16(q, k, v, out, full, scale, causal);
  if (detail::attention_by_columns_chosen(s))
    attention_by_columns(q, k, v, out, full, scale, causal);
  else
    attention_by_rows(q, k, v, out, full, scale, causal);
}

// Score columns where score rows waste part of P·V, paired on Emerald Rapids (bench/results
// "Attention on Emerald Rapids"; kernel_tuning() turns them on there only): head dims above one
// panel whose last columns fill neither a panel of 32 nor a half of 16 — SD 1.5's level-1 head of
// 40, computed in rows on 48 columns: 4096 keys × 40 float32 ×1.07–1.17, bf16 ×1.12–1.13. Not for 64,
// 160 or 512 (rows ×1.03–1.10 faster), 80 (float32 1024 keys ×1.02–1.04 in columns, bf16 ×1.12
// slower), nor for short key rows (77 text tokens: rows ×1.05). Head dims under 32 (the tiny
// test models' 8) were not measured: rows.
bool detail::attention_by_columns_chosen(const AttentionShape& s) {
  return kernel_tuning().attention_columns && vec_math(kernel_isa()).softmax_columns && s.head_dim > kPanel &&
         s.head_dim % (kPanel / 2) != 0 && s.kv_len >= 256;
}

namespace {

// Score rows (S = Q·Kᵀ, queries × keys), on a shape with every stride resolved: every ISA and
// every shape attention_by_columns_chosen() leaves.
void attention_by_rows(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                       float scale, bool causal) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  const int64_t ldq = s.ldq, ldk = s.ldk, ldv = s.ldv, ldo = s.ldo;
  const int64_t bsq = s.batch_stride_q, bsk = s.batch_stride_k, bsv = s.batch_stride_v, bso = s.batch_stride_o;
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
      detail::AlignedFloats S(Br * Bc), O(Br * dp);
      std::vector<float> m(Br), l(Br);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t gi = t / q_blocks, b = (g0 + gi) / H, h = (g0 + gi) % H;
        const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
        const float* qb = q + b * bsq + i0 * ldq + h * d;
        const float* kp = kv_packed + gi * (k_size + v_size);
        const float* vp = kp + k_size;
        std::fill(O.get(), O.get() + Br * dp, 0.0f);
        std::fill(m.begin(), m.end(), ninf);
        std::fill(l.begin(), l.end(), 0.0f);
        const int64_t kend = causal ? std::min(Lk, i0 + br) : Lk;
        for (int64_t j0 = 0; j0 < kend; j0 += Bc) {
          const int64_t nc = std::min(Bc, kend - j0);
          detail::block_gemm(mk, qb, ldq, br, d, kp + (j0 / kPanel) * d * kPanel, d * kPanel, nc, S.get(), Bc,
                             false);
          for (int64_t r = 0; r < br; ++r) {
            float* sr = S.get() + r * Bc;
            const int64_t valid = causal ? std::min(nc, i0 + r - j0 + 1) : nc;
            if (valid <= 0) {
              std::fill(sr, sr + nc, 0.0f);
              continue;
            }
            const float alpha = softmax_update(sr, static_cast<int>(valid), scale, &m[r], &l[r]);
            std::fill(sr + valid, sr + nc, 0.0f);
            if (alpha != 1.0f) {
              float* o = O.get() + r * dp;
              for (int64_t c = 0; c < d; ++c) o[c] *= alpha;
            }
          }
          detail::block_gemm(mk, S.get(), Bc, br, nc, vp + j0 * kPanel, Lk * kPanel, d, O.get(), dp, true);
        }
        for (int64_t r = 0; r < br; ++r) {
          float* dst = out + b * bso + (i0 + r) * ldo + h * d;
          const float* o = O.get() + r * dp;
          const float lr = l[r];
          for (int64_t c = 0; c < d; ++c) dst[c] = o[c] / lr;
        }
      }
    });
  }
}

// float32 products of one head for detail::ColumnBlock: K's rows side by side (stride d), Vᵀ
// (d rows of stride ldvt); Qᵀ panels packed per query block.
class F32Products {
 public:
  F32Products(const detail::MicroKernel& mk, int64_t d, int64_t Br)
      : mk_(mk), d_(d), q_(Br / kPanel * d * kPanel) {}
  void set_head(const float* k, const float* vt, int64_t ldvt) { k_ = k, vt_ = vt, ldvt_ = ldvt; }
  int64_t mr() const { return mk_.mr; }

  void pack_queries(const float* q, int64_t ldq, int64_t i0, int64_t br) {  // zero past br
    const int64_t d = d_;
    std::fill(q_.get(), q_.get() + (br + kPanel - 1) / kPanel * d * kPanel, 0.0f);
    for (int64_t i = 0; i < br; ++i)
      for (int64_t c = 0; c < d; ++c)
        q_.get()[(i / kPanel) * d * kPanel + c * kPanel + i % kPanel] = q[(i0 + i) * ldq + c];
  }
  void scores(int64_t key, int rows, int64_t p, int cols, float* s) const {
    mk_.fn(d_, k_ + key * d_, d_, q_.get() + p * d_ * kPanel, s, kPanel, rows, cols, false);
  }
  void probabilities(int64_t, const float*, int) const {}  // Sᵀ's panels are P·V's B as they are
  void accumulate(int64_t, const float* s, int64_t j0, int nc, int64_t c0, int rows, int cols, float* o,
                  bool load) const {
    mk_.fn(nc, vt_ + c0 * ldvt_ + j0, ldvt_, s, o, kPanel, rows, cols, load);
  }

 private:
  const detail::MicroKernel& mk_;
  int64_t d_;
  detail::AlignedFloats q_;
  const float *k_ = nullptr, *vt_ = nullptr;
  int64_t ldvt_ = 0;
};

// Score columns (attention_columns.h) in float32, on a shape with every stride resolved. Per
// (batch, head) V is packed as Vᵀ (head_dim × keys) and K's rows side by side (the micro-kernel's
// A, read in order: from where they lie, 4096 keys × 80 ran ×1.02–1.15 slower than score rows,
// packed ×0.95–1.08).
void attention_by_columns(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                          float scale, bool causal) {
  const int64_t d = s.head_dim, Lk = s.kv_len;
  const detail::MicroKernel mk = detail::micro_kernel(kernel_isa());
  const int64_t ldvt = detail::column_vt_stride(Lk);
  auto pack = [&](int64_t b, int64_t h, float* vt) {
    for (int64_t j = 0; j < Lk; ++j) {
      const float* vr = v + b * s.batch_stride_v + j * s.ldv + h * d;
      for (int64_t c = 0; c < d; ++c) vt[c * ldvt + j] = vr[c];
    }
    float* kh = vt + d * ldvt;
    for (int64_t j = 0; j < Lk; ++j)
      std::memcpy(kh + j * d, k + b * s.batch_stride_k + j * s.ldk + h * d, d * sizeof(float));
  };
  detail::run_by_columns(
      q, out, s, scale, causal, detail::column_key_tile(mk.mr), d * ldvt + Lk * d,
      [&](int64_t Br) { return F32Products(mk, d, Br); }, pack,
      detail::vec_math(kernel_isa()).softmax_columns);
}

}  // namespace
}  // namespace octodiff::kernels
