// What the Winograd convolutions (conv2d_winograd.cpp) share with their per-ISA helpers
// (winograd_avx512.cpp): 16 float lanes as GCC vector extensions — one AVX-512 register or two
// AVX2 ones, whatever the file is compiled for — and F(2×2, 3×3)'s input transform. Everything
// here has internal linkage (static, or templates instantiated with a file's own lambdas), so
// a file compiled for AVX-512 never lends its code to one compiled for the baseline.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace octodiff::kernels::detail {

// aligned(4): rows are only float-aligned.
typedef float Lanes __attribute__((vector_size(64), aligned(4)));
constexpr int64_t kLanes = 16;

static inline Lanes load(const float* p) {
  return *reinterpret_cast<const Lanes*>(p);
}
static inline void store(float* p, Lanes v) {
  *reinterpret_cast<Lanes*>(p) = v;
}
// A non-temporal store (p 64-byte aligned) where the file's ISA has one, else store(); and the
// fence a thread issues after its non-temporal stores, before others may read them.
static inline void stream(float* p, Lanes v) {
#if defined(__AVX512F__)
  __m512 m;
  std::memcpy(&m, &v, sizeof m);
  _mm512_stream_ps(p, m);
#elif defined(__AVX__)
  __m256 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  _mm256_stream_ps(p, lo);
  _mm256_stream_ps(p + 8, hi);
#else
  store(p, v);
#endif
}
static inline void stream_fence() {
#if defined(__SSE__)
  _mm_sfence();
#endif
}

// Bᵀ d B of F(2×2, 3×3), Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], for 16 channels of one
// tile: the patch's element (i, j) at d + i·row + j·col; put(p, value) receives position
// p = i·4 + j of the transformed tile.
template <typename Put>
static inline void winograd_f2x2_input(const float* d, int64_t row, int64_t col, Put put) {
  Lanes t[4][4];
  for (int j = 0; j < 4; ++j) {
    const float* dj = d + j * col;
    const Lanes d0 = load(dj), d1 = load(dj + row), d2 = load(dj + 2 * row), d3 = load(dj + 3 * row);
    t[0][j] = d0 - d2;
    t[1][j] = d1 + d2;
    t[2][j] = d2 - d1;
    t[3][j] = d1 - d3;
  }
  for (int i = 0; i < 4; ++i) {
    put(i * 4 + 0, t[i][0] - t[i][2]);
    put(i * 4 + 1, t[i][1] + t[i][2]);
    put(i * 4 + 2, t[i][2] - t[i][1]);
    put(i * 4 + 3, t[i][1] - t[i][3]);
  }
}

}  // namespace octodiff::kernels::detail
