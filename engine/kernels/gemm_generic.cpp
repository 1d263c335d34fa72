// Portable micro-kernel (4 × 32): plain C++ the compiler vectorises. Note that GCC contracts
// a*b+c into FMA for C++ whatever -std says (its ISO default of -ffp-contract=off is for C
// only), so on an FMA-capable build this computes the same bits as the SIMD kernels.
#include <algorithm>

#include "kernels/internal.h"

namespace octodiff::kernels::detail {
namespace {

template <int MR>
void kernel(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
            int cols, bool load) {
  float acc[MR][kPanel];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kPanel; ++j) acc[r][j] = (load && j < cols) ? c[r * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kPanel;
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * lda + k];
      for (int j = 0; j < kPanel; ++j) acc[r][j] += av * bk[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < cols; ++j) c[r * ldc + j] = acc[r][j];
}

void dispatch(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
              int rows, int cols, bool load) {
  switch (rows) {
    case 4: return kernel<4>(kc, a, lda, b, c, ldc, cols, load);
    case 3: return kernel<3>(kc, a, lda, b, c, ldc, cols, load);
    case 2: return kernel<2>(kc, a, lda, b, c, ldc, cols, load);
    default: return kernel<1>(kc, a, lda, b, c, ldc, cols, load);
  }
}

}  // namespace

MicroKernel micro_kernel_generic() { return {4, &dispatch}; }

}  // namespace octodiff::kernels::detail
