// The tiny autoencoder (TAESD, models/autoencoder_tiny.h) at full size — 64 channels, TAESD's
// blocks, random weights — decoding 64×64 latents to a 512×512 image and encoding a 512×512
// image, in f32 and bf16. "FLOPS" counts the direct convolutions' products (taesd_*_flops,
// models/flop_count.h: decode 141.4 GFLOP, encode 122.3 GFLOP; Winograd's figures are
// "effective", as in BM_ConvWinograd); "of_peak" divides the rate by the fp32 (or bf16) peak
// measured once on as many threads (bench/peak_flops.h). Wall-clock rates, unless
// OCTODIFF_BENCH_CPU_TIME is set: then rates (and of_peak) use the benchmark thread's CPU time —
// with OCTODIFF_THREADS=1, what the model achieves while it has a core on a shared machine.
// OCTODIFF_BENCH_VERSUS and OCTODIFF_BENCH_ADJACENT_PEAK work as for the kernels (bench_context.h).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "bench_context.h"
#include "core/device.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/autoencoder_tiny.h"
#include "models/flop_count.h"
#include "models/parameter_catalog.h"

namespace {

using namespace octodiff;

// Full-size TAESD with synthetic weights (parameter_catalog.h), written to a temporary file and
// loaded the way every model is.
const AutoencoderTiny& taesd(kernels::Precision precision) {
  static std::map<kernels::Precision, std::unique_ptr<AutoencoderTiny>> loaded;
  auto& slot = loaded[precision];
  if (slot) return *slot;
  const AutoencoderTinyConfig config;  // TAESD's defaults
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ParameterSpec& p : autoencoder_tiny_parameters(config)) {
    Tensor t = Tensor::empty(p.shape);
    synthetic_parameter_values(p, 42, t.data());
    tensors.emplace_back(p.name, t);
  }
  const auto file = std::filesystem::temp_directory_path() / ("octodiff-taesd-bench-" + std::to_string(getpid()) +
                                                              ".safetensors");
  write_safetensors_f32(file, tensors);
  {
    auto w = weights_from_safetensors({file}, "random TAESD");
    slot = std::make_unique<AutoencoderTiny>(AutoencoderTiny::load(*w, config, precision));
  }
  std::filesystem::remove(file);
  return *slot;
}

using bench::peak_gflops;

Tensor random_tensor(const Shape& shape, float lo, float hi) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = dist(gen);
  return t;
}

// Runs `call` per iteration (bench::iterate: FLOP/s, the fraction of the peak, and the paired and
// adjacent-peak modes), after one warm-up call, with activations from a caching arena as the
// pipeline's (its blocks are faulted in by the warm-up call and reused, not returned to the
// system after each call and faulted in again): both bench::iterate's.
template <typename Call>
void run(benchmark::State& state, kernels::Precision precision, double flops, Call call) {
  bench::iterate(state, flops, precision, [&] { benchmark::DoNotOptimize(call()); });
  state.counters["GFLOP"] = flops / 1e9;
  state.counters["peak_GFLOPS"] = peak_gflops(precision);
  state.counters["threads"] = current_device().threads;
}

kernels::Precision precision_arg(const benchmark::State& state) {
  return state.range(0) ? kernels::Precision::BF16 : kernels::Precision::F32;
}

void BM_TaesdDecode512(benchmark::State& state) {
  const kernels::Precision p = precision_arg(state);
  const AutoencoderTiny& model = taesd(p);
  const Tensor latents = random_tensor({1, 64, 64, 4}, -3, 3);
  run(state, p, taesd_decode_flops(model.config(), 1, 64, 64), [&] { return model.decode_nhwc(latents); });
}

void BM_TaesdEncode512(benchmark::State& state) {
  const kernels::Precision p = precision_arg(state);
  const AutoencoderTiny& model = taesd(p);
  const Tensor image = random_tensor({1, 512, 512, 3}, -1, 1);
  run(state, p, taesd_encode_flops(model.config(), 1, 512, 512), [&] { return model.encode_nhwc(image); });
}

void taesd_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bf16"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
  if (!bench::cpu_time_clock()) b->UseRealTime();
}
BENCHMARK(BM_TaesdDecode512)->Apply(taesd_args);
BENCHMARK(BM_TaesdEncode512)->Apply(taesd_args);

}  // namespace
