// Kernel benchmarks at the real SD1.5 shapes (512×512 images ⇒ 64×64 latents, batch 2).
// Compute-bound kernels report FLOP/s ("FLOPS" counter) and the fraction of the measured fp32 or
// bf16 peak ("of_peak", bench_context.h), memory-bound ones bytes/s. The JSON context names the
// CPU and the kernel blocking in use (OCTODIFF_KERNEL_TUNING overrides it: bench/tune_kernels.sh).
// Short mode for CI: --benchmark_min_time=0.01 runs each case about once.
// On a shared machine whose speed swings from run to run, two opt-in modes pair every GEMM,
// convolution and attention iteration with a neighbour (bench_context.h): OCTODIFF_BENCH_VERSUS=
// "key=value" with the same call under that tuning ("versus_speedup"; tune_kernels.sh --paired),
// OCTODIFF_BENCH_ADJACENT_PEAK=1 with peak probes ("of_adjacent_peak").
// OCTODIFF_ISA=avx2|generic benchmarks the fallback paths; OCTODIFF_THREADS sets the threads.
// On a shared machine, OCTODIFF_THREADS=1 OCTODIFF_BENCH_CPU_TIME=1 measures rates against the
// benchmark thread's CPU time (what the kernel achieves while it has a core).
// The *Bf16 variants pack weights as bf16 (Precision::BF16); compare with the bf16 peak
// (octodiff-bench prints it), twice the fp32 FMA peak on AVX-512 BF16 CPUs.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_context.h"
#include "core/memory.h"
#include "kernels/activations.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"

namespace {

using namespace octodiff::kernels;

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Milliseconds; wall-clock rates (the kernels are multi-threaded) unless OCTODIFF_BENCH_CPU_TIME.
void timing(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond);
  if (!octodiff::bench::cpu_time_clock()) b->UseRealTime();
}

// Args: M (tokens), K, N. Linear layer with torch (out, in) weight and bias.
void gemm_case(benchmark::State& state, Precision precision) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  auto a = random_vec(M * K, 1), w = random_vec(N * K, 2), bias = random_vec(N, 3);
  const PackedMatrix p = pack_b(w.data(), K, N, /*transposed=*/true, precision);
  std::vector<float> c(M * N);
  Epilogue ep;
  ep.bias = bias.data();
  octodiff::bench::iterate(state, 2.0 * M * N * K, precision, [&] {
    gemm(a.data(), M, K, p, c.data(), N, ep);
    benchmark::DoNotOptimize(c.data());
  });
}
void BM_Gemm(benchmark::State& state) {
  gemm_case(state, Precision::F32);
}
void BM_GemmBf16(benchmark::State& state) {
  gemm_case(state, Precision::BF16);
}
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"})
      ->Args({8192, 320, 320})   // level 1: q/k/v/out projections
      ->Args({8192, 320, 2560})  // level 1: GEGLU projection
      ->Args({8192, 1280, 320})  // level 1: FF output
      ->Args({2048, 640, 640})   // level 2
      ->Args({2048, 640, 5120})
      ->Args({2048, 2560, 640})
      ->Args({512, 1280, 1280})  // level 3
      ->Args({512, 1280, 10240})
      ->Args({512, 5120, 1280})
      ->Args({154, 768, 320})     // cross-attention K/V of the text context
      ->Args({512, 11520, 1280})  // the 16x16 level's 3x3 conv as a plain GEMM (no gather)
      ->Args({128, 11520, 1280})  // the 8x8 level's
      ->Args({77, 1024, 1024})    // SD 2 text encoder (OpenCLIP ViT-H, 77 tokens): q/k/v/out
      ->Args({77, 1024, 4096})    // its MLP input
      ->Args({77, 4096, 1024});   // its MLP output
  timing(b);
}
BENCHMARK(BM_Gemm)->Apply(gemm_shapes);
BENCHMARK(BM_GemmBf16)->Apply(gemm_shapes);

// Args: N, H (=W), Ci, Co, kernel size. GFLOP/s count the direct convolution's products, so
// Winograd's figures are "effective" (it does 2.25x fewer).
void conv_case(benchmark::State& state, Precision precision, ConvAlgorithm algorithm = ConvAlgorithm::Direct) {
  const int64_t N = state.range(0), H = state.range(1), Ci = state.range(2), Co = state.range(3);
  const int k = static_cast<int>(state.range(4));
  auto x = random_vec(N * H * H * Ci, 4), w = random_vec(Co * Ci * k * k, 5), bias = random_vec(Co, 6);
  const Conv2dWeights cw = pack_conv2d(w.data(), bias.data(), Co, Ci, k, k, precision, algorithm);
  std::vector<float> y(N * H * H * Co);
  octodiff::bench::iterate(state, 2.0 * N * H * H * Co * Ci * k * k, precision, [&] {
    conv2d_nhwc(x.data(), N, H, H, cw, Conv2dGeometry::same(k), y.data());
    benchmark::DoNotOptimize(y.data());
  });
}
void BM_Conv(benchmark::State& state) {
  conv_case(state, Precision::F32);
}
void BM_ConvBf16(benchmark::State& state) {
  conv_case(state, Precision::BF16);
}
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "HW", "Ci", "Co", "k"})
      ->Args({2, 64, 320, 320, 3})
      ->Args({2, 32, 640, 640, 3})
      ->Args({2, 16, 1280, 1280, 3})
      ->Args({2, 8, 1280, 1280, 3})
      ->Args({2, 64, 4, 320, 3})     // UNet conv_in
      ->Args({1, 512, 128, 128, 3})  // VAE decoder, last up block
      ->Args({1, 256, 256, 256, 3})
      ->Args({1, 128, 512, 512, 3})
      ->Args({2, 64, 320, 320, 1})  // proj_in / proj_out
      ->Args({2, 64, 640, 320, 1})  // conv_shortcut
      ->Args({2, 64, 320, 4, 3})    // UNet conv_out (few output channels: conv2d_few_outputs.cpp)
      ->Args({1, 512, 128, 3, 3})   // VAE decoder conv_out
      ->Args({1, 512, 64, 3, 3});   // TAESD decoder's last convolution
  timing(b);
}
BENCHMARK(BM_Conv)->Apply(conv_shapes);
BENCHMARK(BM_ConvBf16)->Apply(conv_shapes);

void BM_ConvWinograd(benchmark::State& state) {
  conv_case(state, Precision::F32, ConvAlgorithm::Winograd);
}
void BM_ConvWinogradBf16(benchmark::State& state) {
  conv_case(state, Precision::BF16, ConvAlgorithm::Winograd);
}
void BM_ConvWinograd4x4(benchmark::State& state) {  // F(4×4, 3×3): float32 only
  conv_case(state, Precision::F32, ConvAlgorithm::Winograd4x4);
}
void winograd_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "HW", "Ci", "Co", "k"})
      ->Args({2, 64, 320, 320, 3})
      ->Args({2, 32, 640, 640, 3})
      ->Args({2, 32, 1920, 640, 3})  // up block's first resnet
      ->Args({1, 512, 128, 128, 3})
      ->Args({1, 256, 256, 256, 3})
      ->Args({1, 128, 512, 512, 3})
      ->Args({1, 512, 64, 64, 3})  // TAESD decoder: its blocks at each level (512x512 image)
      ->Args({1, 256, 64, 64, 3})
      ->Args({1, 128, 64, 64, 3})
      ->Args({1, 64, 64, 64, 3});
  timing(b);
}
BENCHMARK(BM_ConvWinograd)->Apply(winograd_shapes);
BENCHMARK(BM_ConvWinogradBf16)->Apply(winograd_shapes);
BENCHMARK(BM_ConvWinograd4x4)->Apply(winograd_shapes);

// Weight packing, which a model's first load does for every weight: bytes/s of float32 weight
// read. Packed into one buffer reused across iterations, so that the first touch of fresh memory
// (the kernel zeroing pages; on a VM, the host backing them) is left out.
class ReusedWeightStorage : public octodiff::WeightStorage {
 public:
  explicit ReusedWeightStorage(size_t bytes)
      : p_(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096), std::free) {
    std::memset(p_.get(), 0, bytes);
  }
  std::shared_ptr<void> allocate(size_t, const std::string&) override { return p_; }

 private:
  std::shared_ptr<void> p_;
};

// Args: out, in, kernel size (1: a torch Linear weight, packed by pack_b).
void pack_case(benchmark::State& state, Precision precision) {
  const int64_t N = state.range(0), Ci = state.range(1);
  const int k = static_cast<int>(state.range(2));
  const int64_t K = Ci * k * k;
  const auto w = random_vec(N * K, 7);
  ReusedWeightStorage storage(packed_size(K, N, precision));
  const octodiff::WeightStorageScope scope(&storage);
  for (auto _ : state) {
    if (k == 1) {
      const PackedMatrix p = pack_b(w.data(), K, N, /*transposed=*/true, precision);
      benchmark::DoNotOptimize(p.bytes());
    } else {
      const Conv2dWeights cw = pack_conv2d(w.data(), nullptr, N, Ci, k, k, precision);
      benchmark::DoNotOptimize(cw.packed.bytes());
    }
  }
  state.SetBytesProcessed(state.iterations() * N * K * static_cast<int64_t>(sizeof(float)));
}
void BM_PackWeight(benchmark::State& state) {
  pack_case(state, Precision::F32);
}
void BM_PackWeightBf16(benchmark::State& state) {
  pack_case(state, Precision::BF16);
}
void pack_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"out", "in", "k"})
      ->Args({1280, 1280, 3})  // the UNet's 16x16 and 8x8 levels
      ->Args({640, 640, 3})
      ->Args({320, 320, 3})
      ->Args({512, 512, 3})     // the VAE decoder's
      ->Args({10240, 1280, 1})  // level 3 GEGLU projection
      ->Args({1280, 5120, 1})   // level 3 FF output
      ->Args({3072, 768, 1});   // the text encoder's MLP
  timing(b);
}
BENCHMARK(BM_PackWeight)->Apply(pack_shapes);
BENCHMARK(BM_PackWeightBf16)->Apply(pack_shapes);

// Args: batch, q_len, kv_len, heads, head_dim.
void attention_case(benchmark::State& state, Precision precision) {
  AttentionShape s;
  s.batch = state.range(0);
  s.q_len = state.range(1);
  s.kv_len = state.range(2);
  s.heads = state.range(3);
  s.head_dim = state.range(4);
  const int64_t C = s.heads * s.head_dim;
  auto q = random_vec(s.batch * s.q_len * C, 7), k = random_vec(s.batch * s.kv_len * C, 8);
  auto v = random_vec(s.batch * s.kv_len * C, 9);
  std::vector<float> out(q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  octodiff::bench::iterate(state, 4.0 * s.batch * s.heads * s.q_len * s.kv_len * s.head_dim, precision, [&] {
    attention(q.data(), k.data(), v.data(), out.data(), s, scale, false, precision);
    benchmark::DoNotOptimize(out.data());
  });
}
void BM_Attention(benchmark::State& state) {
  attention_case(state, Precision::F32);
}
void BM_AttentionBf16(benchmark::State& state) {
  attention_case(state, Precision::BF16);
}
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "Lq", "Lk", "H", "d"})
      ->Args({2, 4096, 4096, 8, 40})  // level-1 self-attention
      ->Args({2, 4096, 4096, 8, 80})
      ->Args({2, 4096, 4096, 8, 160})
      ->Args({2, 1024, 1024, 8, 80})    // level-2 self-attention
      ->Args({2, 4096, 77, 8, 40})      // cross-attention to the text
      ->Args({1, 4096, 4096, 5, 64})    // SD 2.x (SD-Turbo's one-step image): level-1 self-attention
      ->Args({1, 1024, 1024, 10, 64})   // and level 2
      ->Args({1, 4096, 4096, 1, 512});  // VAE mid-block attention
  timing(b);
}
BENCHMARK(BM_Attention)->Apply(attention_shapes);
BENCHMARK(BM_AttentionBf16)->Apply(attention_shapes);

void BM_GroupNormSilu(benchmark::State& state) {
  const int64_t N = 2, HW = state.range(0) * state.range(0), C = state.range(1);
  auto x = random_vec(N * HW * C, 10), g = random_vec(C, 11), b = random_vec(C, 12);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    group_norm_nhwc(x.data(), N, HW, C, 32, 1e-5f, g.data(), b.data(), y.data(), true);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(x.size() * sizeof(float)));
}
BENCHMARK(BM_GroupNormSilu)->ArgNames({"HW", "C"})->Args({64, 320})->Args({32, 640})
    ->Apply(timing);

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), C = state.range(1);
  auto x = random_vec(rows * C, 13), g = random_vec(C, 14), b = random_vec(C, 15);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    layer_norm(x.data(), rows, C, 1e-5f, g.data(), b.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(x.size() * sizeof(float)));
}
BENCHMARK(BM_LayerNorm)->ArgNames({"rows", "C"})->Args({8192, 320})->Apply(timing);

// Args: rows, inner, 0 = tanh GELU (Flax) / 1 = erf GELU (torch).
void BM_Geglu(benchmark::State& state) {
  const int64_t rows = state.range(0), inner = state.range(1);
  const Gelu kind = state.range(2) ? Gelu::Erf : Gelu::Tanh;
  auto u = random_vec(rows * 2 * inner, 16);
  std::vector<float> y(rows * inner);
  for (auto _ : state) {
    geglu(u.data(), rows, inner, y.data(), kind);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * rows * inner * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Geglu)->ArgNames({"rows", "inner", "erf"})->Args({8192, 1280, 0})->Args({8192, 1280, 1})
    ->Apply(timing);

void BM_Silu(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto x = random_vec(n, 17);
  std::vector<float> y(n);
  for (auto _ : state) {
    silu(x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Silu)->Arg(2 * 64 * 64 * 320)->Apply(timing);

}  // namespace
