// The CLIP text encoder (models/clip_text_model.h) at full width — SD 1.x's ViT-L/14 tower and
// SD 2.x's ViT-H/14 tower — with a few of its layers (they are all alike; the whole tower is 12 or
// 23 of them), random weights, float32 as the pipeline runs it, on one prompt (batch 1, the
// few-step models) and a guided pair (batch 2): 77 tokens. "FLOPS" counts the layers' products
// (clip_text_flops, models/flop_count.h); "of_peak" divides the rate by the fp32 peak measured once
// on as many threads (bench/peak_flops.h). Issue 20: a new prompt's encoding is what a one-step
// image pays on top of its UNet call.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>

#include "bench_context.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/clip_text_model.h"
#include "models/flop_count.h"
#include "models/parameter_catalog.h"

namespace {

using namespace octodiff;

constexpr int kLayers = 3;

ClipTextConfig bench_config(int tower) {
  ClipTextConfig c = tower == 2 ? ClipTextConfig::sd2() : ClipTextConfig::sd1();
  c.num_hidden_layers = kLayers;
  return c;
}

// The tower with synthetic weights (parameter_catalog.h), written to a temporary file and loaded
// the way every model is.
const ClipTextModel& text_encoder(int tower) {
  static std::map<int, std::unique_ptr<ClipTextModel>> loaded;
  auto& slot = loaded[tower];
  if (slot) return *slot;
  const ClipTextConfig config = bench_config(tower);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ParameterSpec& p : clip_text_parameters(config)) {
    Tensor t = Tensor::empty(p.shape);
    synthetic_parameter_values(p, 42, t.data());
    tensors.emplace_back(p.name, t);
  }
  const auto file = std::filesystem::temp_directory_path() /
                    ("octodiff-text-bench-" + std::to_string(getpid()) + ".safetensors");
  write_safetensors_f32(file, tensors);
  {
    auto w = weights_from_safetensors({file}, "random text encoder");
    slot = std::make_unique<ClipTextModel>(ClipTextModel::load(*w, config));
  }
  std::filesystem::remove(file);
  return *slot;
}

// range(0): the tower (1 = ViT-L/14, 2 = ViT-H/14); range(1): prompts in the batch.
void BM_TextEncoderLayers(benchmark::State& state) {
  const int tower = static_cast<int>(state.range(0));
  const int64_t batch = state.range(1), length = 77;
  const ClipTextModel& model = text_encoder(tower);
  std::vector<int32_t> ids(batch * length);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 49408);
  // Activations from bench::iterate's caching arena, as the pipeline's: faulted in by its
  // warm-up call, then reused.
  bench::iterate(state, clip_text_flops(model.config(), batch, length), kernels::Precision::F32,
                 [&] { benchmark::DoNotOptimize(model.forward(ids, batch, length)); });
  state.counters["layers"] = kLayers;
}
void text_encoder_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tower", "batch"})->Args({1, 2})->Args({2, 1})->Args({2, 2})->Unit(benchmark::kMillisecond);
  if (!bench::cpu_time_clock()) b->UseRealTime();
}
BENCHMARK(BM_TextEncoderLayers)->Apply(text_encoder_args);

}  // namespace
