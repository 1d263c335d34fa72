// The bf16 Winograd input transform with AVX-512 (internal.h, winograd_input_bf16_fn): F(2×2,
// 3×3)'s Bᵀ d B rounded to bf16 in registers, instead of float32 rows that are stored, read back
// and rounded by to_bf16_fn — the same rounding, so the same bits.
#include "kernels/bf16_avx512.h"
#include "kernels/internal.h"
#include "kernels/winograd_lanes.h"

namespace octodiff::kernels::detail {
namespace {

template <__m256i (*Round)(__m512i)>
void input_bf16(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v, int64_t vs) {
  for (int64_t c = 0; c < Ci; c += kLanes)
    winograd_f2x2_input(d + c, row, col, [&](int p, Lanes x) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + p * vs + c), Round(_mm512_castps_si512(__m512(x))));
    });
}

}  // namespace

void winograd_input_bf16_avx512(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                int64_t vs) {
  input_bf16<&round_to_bf16>(d, row, col, Ci, v, vs);
}

void winograd_input_bf16_avx512_dot(const float* d, int64_t row, int64_t col, int64_t Ci, uint16_t* v,
                                    int64_t vs) {
  input_bf16<&round_to_bf16_dot>(d, row, col, Ci, v, vs);
}

}  // namespace octodiff::kernels::detail
