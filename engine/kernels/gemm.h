// GEMM: C = A · B (+ bias, + residual, or += C), with B a weight matrix packed once.
//
// A is an activation matrix (row-major, M × K, row stride lda). B is a weight given either as
// K × N (row-major) or, as torch stores Linear weights, N × K ("transposed"); pack_b copies it
// into the panel layout the micro-kernels read, once, when a model is compiled. Threads split
// M×N tiles only; every output element is accumulated by one thread in a fixed K order, so the
// result is bit-identical for any thread count.
//
// Precision::BF16 packs the weight as bfloat16 (half the memory); every product then takes both
// operands rounded to bfloat16 (A is rounded to nearest even as its blocks are gathered) and
// sums them in float32 — AVX-512 BF16's VDPBF16PS, or the same arithmetic on wider types where
// the CPU lacks it. Inputs, outputs and the epilogue stay float32. ScopedBf16Activations can
// ask for the activations to be kept to ~16 bits instead (two passes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace octodiff::kernels {

enum class Precision { F32, BF16 };
const char* precision_name(Precision p);  // "f32" | "bf16"

class PackedMatrix {
 public:
  PackedMatrix() = default;
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }
  Precision precision() const { return precision_; }
  bool empty() const { return data_ == nullptr; }
  size_t bytes() const { return bytes_; }

  // Implementation detail of the kernels (internal.h describes both panel layouts).
  const float* data() const { return static_cast<const float*>(data_.get()); }             // F32
  const uint16_t* bf16_data() const { return static_cast<const uint16_t*>(data_.get()); }  // BF16
  int panel_width() const { return nr_; }
  float* mutable_data() { return static_cast<float*>(data_.get()); }
  uint16_t* mutable_bf16_data() { return static_cast<uint16_t*>(data_.get()); }

  // A matrix pack_b packed earlier, stored elsewhere (a weight cache file): `data` must hold
  // exactly the bytes pack_b produced for (K, N, precision) with this build's layout.
  static PackedMatrix adopt(int64_t K, int64_t N, Precision precision, std::shared_ptr<void> data, size_t bytes);

 private:
  friend PackedMatrix allocate_packed(int64_t K, int64_t N, Precision precision, bool weight);
  int64_t K_ = 0, N_ = 0;
  int nr_ = 0;
  Precision precision_ = Precision::F32;
  size_t bytes_ = 0;
  std::shared_ptr<void> data_;
};

// How a bf16 product takes its float32 activation operand (a GEMM's or convolution's A,
// attention's q, k and v):
//   Rounded — to the nearest bf16: 8 significant bits. The default.
//   Split   — as the sum of two bf16, hi = round(a) and lo = round(a − hi), each multiplied by the
//             weight in its own pass of the same micro-kernel, accumulated in float32: ~16
//             significant bits for twice the products, so only the weight's rounding remains.
//             Attention, which has no weight, runs in float32.
// The pipeline asks for Split on the UNet call whose error the scheduler amplifies most (see
// sharded_pipeline.cpp). Float32 weights ignore the setting.
enum class Bf16Activations { Rounded, Split };
Bf16Activations bf16_activations();  // this thread's setting

// While one lives, bf16 kernels called from this thread take their activations as `mode` says.
// The kernels read it on the calling thread, so it holds for their worker threads too.
class ScopedBf16Activations {
 public:
  explicit ScopedBf16Activations(Bf16Activations mode);
  ~ScopedBf16Activations();
  ScopedBf16Activations(const ScopedBf16Activations&) = delete;
  ScopedBf16Activations& operator=(const ScopedBf16Activations&) = delete;

 private:
  Bf16Activations previous_;
};

// transposed == false: b is K × N row-major (b[k*N + n]).
// transposed == true:  b is N × K row-major (b[n*K + k]), e.g. a torch Linear weight (out, in).
// BF16 rounds every element to nearest even (core/half.h's f32_to_bf16).
PackedMatrix pack_b(const float* b, int64_t K, int64_t N, bool transposed,
                    Precision precision = Precision::F32);

// What a packed weight is, as pack_b stores it through the weight store (core/memory.h); the
// panel layout is part of the tag, so a cache packed by a build with another layout never fits.
std::string packed_tag(int64_t K, int64_t N, Precision precision);
size_t packed_size(int64_t K, int64_t N, Precision precision);  // bytes pack_b stores

struct Epilogue {
  const float* bias = nullptr;      // N values added to every row
  const float* residual = nullptr;  // M × N (row stride ldr) added after the bias
  int64_t ldr = 0;
  bool accumulate = false;          // C += A·B instead of C = A·B
};

// C[M × N] (row stride ldc) = A[M × K] (row stride lda) · B, then the epilogue; at B's precision.
void gemm(const float* a, int64_t M, int64_t lda, const PackedMatrix& b, float* c, int64_t ldc,
          const Epilogue& epilogue = {});

// Plain C = A · Bᵀ for two activation matrices (A: M × K, B: N × K), used where no packing pays.
void gemm_abt(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
              int64_t M, int64_t N, int64_t K);

}  // namespace octodiff::kernels
