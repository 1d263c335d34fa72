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

}  // namespace octodiff::kernels
