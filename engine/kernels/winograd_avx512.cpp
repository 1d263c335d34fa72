// The bf16 Winograd input transform with AVX-512 (internal.h, winograd_input_bf16_fn): F(2×2,
// 3×3)'s Bᵀ d B rounded to bf16 in registers, instead of float32 rows that are stored, read back
// and rounded by to_bf16_fn — the same rounding, so the same bits.
#include "kernels/bf16_avx512.h"
#include "kernels/internal.h"
#include "kernels/winograd_lanes.h"

namespace octodiff::kernels::detail {
namespace {

// 32 channels at a time where there are as many: a position's two halves rounded by one
// RoundPair into one 64-byte store (on Zen 4 a third faster than 16 at a time, the tile in L1);
// 16 at a time for the rest.
template <__m256i (*Round)(__m512i), __m512i (*RoundPair)(__m512, __m512)>
void input_bf16(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v, int64_t vs) {
  int64_t c = 0;
  for (; c + 2 * kLanes <= Ci; c += 2 * kLanes) {
    Lanes lo[16], hi[16];
    winograd_f2x2_input(d + c, row, col, [&](int p, Lanes x) { lo[p] = x; });
    winograd_f2x2_input(d + c + kLanes, row, col, [&](int p, Lanes x) { hi[p] = x; });
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(v + p * vs + c, RoundPair(__m512(lo[p]), __m512(hi[p])));
  }
  for (; c < Ci; c += kLanes)
    winograd_f2x2_input(d + c, row, col, [&](int p, Lanes x) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + p * vs + c), Round(_mm512_castps_si512(__m512(x))));
    });
}

}  // namespace

void winograd_input_bf16_avx512(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                int64_t vs) {
  input_bf16<&round_to_bf16, &round_pair_to_bf16>(d, row, col, Ci, v, vs);
}

void winograd_input_bf16_avx512_dot(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                    int64_t vs) {
  input_bf16<&round_to_bf16_dot, &round_pair_to_bf16_dot>(d, row, col, Ci, v, vs);
}

}  // namespace octodiff::kernels::detail
