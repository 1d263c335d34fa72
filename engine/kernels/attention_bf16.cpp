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
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "kernels/internal.h"
#include "kernels/isa.h"

namespace octodiff::kernels::detail {
namespace {

constexpr int64_t kKeyTile = 256;  // Bc, a multiple of kPanel (so key tiles start on a pair)

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

}  // namespace

void attention_bf16(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
                    float scale, bool causal) {
  const int64_t d = s.head_dim, H = s.heads, B = s.batch, Lq = s.q_len, Lk = s.kv_len;
  const Isa isa = kernel_isa();
  const MicroKernelBf16 mk = micro_kernel_bf16(isa);
  const ToBf16Fn convert = to_bf16_fn(isa);
  const auto softmax_update = vec_math(isa).softmax_update_bf16;
  const int64_t d2 = bf16_pairs(d), Lk2 = bf16_pairs(Lk);
  const int64_t Lkp = round_up(Lk, kPanel), dp = round_up(d, kPanel);
  const int64_t k_size = (Lkp / kPanel) * d2 * kPairRow;  // bf16 elements per (batch, head)
  const int64_t v_size = (dp / kPanel) * Lk2 * kPairRow;

  // Pack K as Kᵀ panels and V as panels, per (batch, head); padding stays zero.
  thread_local ThreadBuffer kv_buffer;
  uint16_t* const kv_packed = kv_buffer.get<uint16_t>(B * H * (k_size + v_size));
  parallel_for(B * H, [&](int64_t t0, int64_t t1) {
    std::vector<uint16_t> row(static_cast<size_t>(d));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / H, h = t % H;
      uint16_t* kp = kv_packed + t * (k_size + v_size);
      uint16_t* vp = kp + k_size;
      std::memset(kp, 0, static_cast<size_t>(k_size + v_size) * sizeof(uint16_t));
      for (int64_t j = 0; j < Lk; ++j) {  // key j is column j of Kᵀ, the head dim its K
        convert(k + b * s.batch_stride_k + j * s.ldk + h * d, d, row.data());
        uint16_t* dst = kp + (j / kPanel) * d2 * kPairRow + 2 * (j % kPanel);
        for (int64_t c = 0; c < d; ++c) dst[(c / 2) * kPairRow + c % 2] = row[c];
      }
      for (int64_t j = 0; j < Lk; ++j) {  // key j is row j of V
        convert(v + b * s.batch_stride_v + j * s.ldv + h * d, d, row.data());
        uint16_t* dst = vp + (j / 2) * kPairRow + j % 2;
        for (int64_t c = 0; c < d; ++c) dst[(c / kPanel) * Lk2 * kPairRow + 2 * (c % kPanel)] = row[c];
      }
    }
  });

  const int64_t Br = mk.mr * 4;
  const int64_t Bc = std::min(kKeyTile, Lkp);
  const int64_t q_blocks = (Lq + Br - 1) / Br;
  const int64_t ldq = 2 * d2;  // bf16 Q rows, zero-padded to whole pairs
  const float ninf = -std::numeric_limits<float>::infinity();

  parallel_for(B * H * q_blocks, [&](int64_t t0, int64_t t1) {
    thread_local ThreadBuffer work;
    float* S = work.get<float>(Br * Bc + Br * dp + Br * (Bc + ldq) / 2 + 64);
    float* O = S + Br * Bc;
    uint16_t* P = reinterpret_cast<uint16_t*>(O + Br * dp);  // Br × Bc
    uint16_t* Q = P + Br * Bc;                               // Br × ldq
    std::vector<float> m(Br), l(Br);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / q_blocks, b = bh / H, h = bh % H;
      const int64_t i0 = (t % q_blocks) * Br, br = std::min(Br, Lq - i0);
      const float* qb = q + b * s.batch_stride_q + i0 * s.ldq + h * d;
      const uint16_t* kp = kv_packed + bh * (k_size + v_size);
      const uint16_t* vp = kp + k_size;
      for (int64_t r = 0; r < br; ++r) {
        convert(qb + r * s.ldq, d, Q + r * ldq);
        if (d % 2) Q[r * ldq + d] = 0;
      }
      std::fill(O, O + Br * dp, 0.0f);
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
          if (alpha != 1.0f) {
            float* o = O + r * dp;
            for (int64_t c = 0; c < d; ++c) o[c] *= alpha;
          }
        }
        block_gemm_bf16(mk, P, Bc, br, nc2 / 2, vp + (j0 / 2) * kPairRow, Lk2 * kPairRow, d, O, dp, true);
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
