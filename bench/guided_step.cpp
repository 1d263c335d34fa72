#include "guided_step.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/memory.h"
#include "kernels/gemm.h"
#include "models/flop_count.h"
#include "models/layers.h"
#include "pipeline/sdxl_prompt_encoding.h"
#include "pipeline/sharded_pipeline.h"
#include "peak_flops.h"

namespace octodiff::bench {
namespace {

const char kPrompt[] = "a photograph of an astronaut riding a horse";

// The peak a call of `o.dtype` is a fraction of, measured for 0.1 s: the fp32 FMA peak, or the
// rate of the instruction the bf16 kernels multiply with (bench/peak_flops.h).
std::function<double()> adjacent_probe(const GuidedStepOptions& o) {
  return [&o] { return measure_peak_gflops(o.dtype == ComputeDType::BF16, o.threads, 0.1); };
}

// <k>_adjacent_peak_gflops (the probes around the calls) and <k>_fraction_of_adjacent_peak.
void record_adjacent(const std::string& k, const std::vector<double>& probes, double fraction, nlohmann::json& j) {
  j[k + "_adjacent_peak_gflops"] = probes;
  j[k + "_fraction_of_adjacent_peak"] = fraction;
}

// --img2img: the pipeline's request again from an init image (the text-to-image run's first image,
// so that the encoder sees a picture) at `strength`: first and second call, and the second call's
// time over text-to-image's second call at the same steps (issue 22: about the strength's share).
nlohmann::json img2img_report(ShardedPipeline& pipe, GenerationRequest req, const GenerationResult& text_to_image,
                              double strength) {
  req.init_images = {to_uint8(text_to_image.images.data(), req.height, req.width)};
  req.strength = strength;
  std::fprintf(stderr, "pipeline: image to image at strength %g, first call...\n", strength);
  const GenerationResult first = pipe.run(req);
  std::fprintf(stderr, "pipeline: image to image, second call...\n");
  const GenerationResult second = pipe.run(req);
  return {{"strength", strength},
          {"steps", req.steps},
          {"model_calls", second.model_calls},
          {"text_to_image_model_calls", text_to_image.model_calls},
          {"first_call_seconds", first.timings.total},
          {"second_call_seconds", second.timings.total},
          {"encode_image_seconds", second.timings.encode_image},
          {"text_to_image_second_call_seconds", text_to_image.timings.total},
          {"ratio_to_text_to_image", second.timings.total / text_to_image.timings.total},
          {"peak_rss_mb", second.peak_rss_bytes / 1048576.0}};
}

// The text encoder's output for the networks' calls: [uncond; cond] rows.
struct Conditioning {
  Tensor context;          // (2, tokens, channels)
  UNetTextTime text_time;  // SDXL: pooled embeddings and time ids of the same two rows
};

// Text encoder: [uncond; cond] = 2 sequences of 77 tokens, the empty prompt and a prompt.
Conditioning time_text_encoder(const StableDiffusionModel& model, const GuidedStepOptions& o, nlohmann::json& j) {
  std::vector<int32_t> ids = model.tokenizer().encode("").ids;
  const std::vector<int32_t> cond = model.tokenizer().encode(kPrompt).ids;
  ids.insert(ids.end(), cond.begin(), cond.end());
  Conditioning c;
  j["text_encode_seconds"] = steady_median_seconds(o.repeats, [&] {
    if (!model.is_sdxl()) {
      c.context = model.text_encoder().forward(ids, 2, 77).last_hidden_state;
      return;
    }
    const SdxlTokenizedPrompts tokens =
        tokenize_sdxl_prompts(model.tokenizer(), model.tokenizer_2(), {kPrompt}, {""}, false);
    SdxlConditioning s = encode_sdxl_device_prompts(model.text_encoder(), model.text_encoder_2(), tokens, 0, 1,
                                                    true, sdxl_time_ids({}, o.height, o.width));
    c.context = std::move(s.context);
    c.text_time = std::move(s.text_time);
  });
  return c;
}

// One UNet evaluation at `batch` (2: a guided step, the same latents with the negative and the
// positive prompt): unet_b<batch>_* (and for bf16 at batch 2 the split activations' time).
void time_unet(const StableDiffusionModel& model, const GuidedStepOptions& o, const Conditioning& c, int batch,
               const CachingArena& arena, nlohmann::json& j) {
  const int vsf = model.vae_scale_factor();
  const int64_t h = o.height / vsf, w = o.width / vsf;
  const auto& uc = model.unet().config();
  const Numerics numerics{Flavour::Flax};
  const Tensor latents = pseudo_random({1, h, w, uc.in_channels}, 7);
  Tensor x = Tensor::empty({batch, h, w, uc.in_channels});
  for (int n = 0; n < batch; ++n) std::copy(latents.begin(), latents.end(), x.data() + n * latents.numel());
  Tensor ctx = c.context.slice0(0, batch);
  const UNetTextTime tt{model.is_sdxl() ? c.text_time.text_embeds.slice0(0, batch) : Tensor(),
                        model.is_sdxl() ? c.text_time.time_ids.slice0(0, batch) : Tensor()};
  const UNetTextTime* tt_arg = model.is_sdxl() ? &tt : nullptr;
  std::fprintf(stderr, "UNet batch %d at %lldx%lld latents...\n", batch, static_cast<long long>(h),
               static_cast<long long>(w));
  auto forward = [&] {
    model.unet().forward_nhwc(x, std::vector<double>(batch, 500.0), ctx, nullptr, numerics, nullptr, nullptr, tt_arg);
  };
  std::vector<size_t> misses;  // blocks the arena had to get from the system, per call
  std::vector<double> calls, probes;
  const double gflop = unet_flops(uc, batch, h, w) / 1e9;
  double fraction = 0;
  const double s = steady_median_seconds_probed(
      o.repeats,
      [&] {
        const size_t before = arena.system_allocations();
        forward();
        misses.push_back(arena.system_allocations() - before);
      },
      gflop, adjacent_probe(o), &calls, &probes, &fraction);
  const std::string k = "unet_b" + std::to_string(batch);
  record_adjacent(k, probes, fraction, j);
  j[k + "_seconds"] = s;
  j[k + "_call_seconds"] = calls;
  j[k + "_first_call_seconds"] = calls.front();
  j[k + "_gflop"] = gflop;
  j[k + "_gflops"] = gflop / s;
  // The figures above count the whole network for every sample. The guided step's second
  // half shares the text-free first layers with the first (UNet2DCondition::forward_nhwc), so
  // fewer products are executed: reported too, so that neither reads as the other.
  const double executed = gflop - (batch - 1) * unet_text_free_flops(uc, h, w) / 1e9;
  j[k + "_executed_gflop"] = executed;
  j[k + "_executed_gflops"] = executed / s;
  j[k + "_arena_misses_per_call"] = misses;
  if (batch == 2 && o.dtype == ComputeDType::BF16) {
    // A bf16 run's guided calls as the pipeline makes them: the halves as guided pairs
    // (models/layers.h: the same products plus elementwise differences), and the first call
    // with its activations split in two bf16 halves as well (kernels/gemm.h: twice the products).
    const ScopedGuidedPairs pairs(2);
    std::vector<double> pair_calls, split_calls;
    j["unet_b2_guided_pairs_seconds"] = steady_median_seconds(o.repeats, forward, &pair_calls);
    j["unet_b2_guided_pairs_call_seconds"] = pair_calls;
    const kernels::ScopedBf16Activations split(kernels::Bf16Activations::Split);
    j["unet_b2_split_seconds"] = steady_median_seconds(o.repeats, forward, &split_calls);
    j["unet_b2_split_call_seconds"] = split_calls;
  }
}

// The memory while the UNet's weights are still mapped.
void record_memory_after_unet(const CachingArena& arena, nlohmann::json& j) {
  j["peak_rss_after_unet_mb"] = peak_rss_bytes() / 1048576.0;
  // Resident memory while the UNet's weights are still mapped: file-backed (the weights, from
  // the weight cache) and anonymous (activations, everything else).
  std::ifstream st("/proc/self/status");
  std::string line;
  while (std::getline(st, line)) {
    if (line.rfind("RssAnon:", 0) == 0) j["rss_anon_after_unet_mb"] = std::stod(line.substr(8)) / 1024.0;
    if (line.rfind("RssFile:", 0) == 0) j["rss_file_after_unet_mb"] = std::stod(line.substr(8)) / 1024.0;
  }
  j["arena_peak_after_unet_mb"] = arena.peak_bytes_reserved() / 1048576.0;
  j["arena_peak_in_use_after_unet_mb"] = arena.peak_bytes_in_use() / 1048576.0;
}

// The VAE decode of one image from pseudo-random latents: vae_decode_*.
void time_vae_decode(const StableDiffusionModel& model, const GuidedStepOptions& o, nlohmann::json& j) {
  const int vsf = model.vae_scale_factor();
  const int64_t h = o.height / vsf, w = o.width / vsf;
  Tensor z = pseudo_random({1, h, w, model.vae().config().latent_channels}, 11);
  std::fprintf(stderr, "VAE decode %dx%d...\n", o.width, o.height);
  model.prefetch(ModelComponent::Vae);
  std::vector<double> calls, probes;
  const double gflop = vae_decode_flops(model.vae().config(), 1, h, w) / 1e9;
  double fraction = 0;
  const double s = steady_median_seconds_probed(o.repeats, [&] { model.vae().decode_nhwc(z); }, gflop,
                                                adjacent_probe(o), &calls, &probes, &fraction);
  record_adjacent("vae_decode", probes, fraction, j);
  j["vae_decode_seconds"] = s;
  j["vae_decode_call_seconds"] = calls;
  j["vae_decode_first_call_seconds"] = calls.front();
  j["vae_decode_gflop"] = gflop;
  j["vae_decode_gflops"] = gflop / s;
  // bf16 runs decode in float32 where bf16 products are FMAs on widened values (pipeline/model.cpp).
  j["vae_precision"] = kernels::precision_name(model.vae().precision());
}

}  // namespace

void time_pipeline(const std::shared_ptr<const StableDiffusionModel>& model, const GuidedStepOptions& o,
                   nlohmann::json& j) {
  // The pipeline: first call compiles, second reuses the plan.
  ShardedPipeline pipe(model);
  pipe.set_reuse_text_encodings(false);  // the second call encodes its prompts as the first did
  GenerationRequest req;
  req.prompts = {kPrompt};
  req.devices = o.devices;
  req.height = o.height;
  req.width = o.width;
  req.steps = o.steps;
  req.threads = o.threads;
  req.dtype = o.dtype;
  std::fprintf(stderr, "pipeline: %d device(s), %d step(s), first call...\n", o.devices, o.steps);
  GenerationResult first = pipe.run(req);
  std::fprintf(stderr, "pipeline: second call...\n");
  GenerationResult second = pipe.run(req);
  j["compile_seconds"] = first.timings.compile;
  j["cached_compile_seconds"] = second.timings.compile;
  // What a model's first use costs before its first step: packing every weight (the load,
  // when it packed) and the plan. With the weight cache, later loads pack nothing.
  if (!j["load_from_cache"].get<bool>())
    j["compile_with_packing_seconds"] = j["load_seconds"].get<double>() + first.timings.compile;
  j["pipeline"] = {{"devices", o.devices},
                   {"steps", o.steps},
                   {"first_call_seconds", first.timings.total},
                   {"second_call_seconds", second.timings.total},
                   {"text_encode_seconds", second.timings.text_encode},
                   {"mean_step_seconds", second.timings.mean_step},
                   {"step_seconds", second.timings.step},
                   {"decode_seconds", second.timings.decode},
                   {"concurrent_devices", second.concurrent_devices},
                   {"threads_per_device", second.threads_per_device}};
  if (o.img2img) j["img2img"] = img2img_report(pipe, req, second, *o.img2img);
}

void time_networks(const StableDiffusionModel& model, const GuidedStepOptions& o, CachingArena& arena,
                   nlohmann::json& j) {
  // Phases as the pipeline runs them: each network's weights are mapped in before it runs and
  // dropped (with the arena's free blocks) after, so only one network is resident at a time.
  auto end_phase = [&](ModelComponent c) {
    model.release(c);
    arena.trim();
  };
  model.prefetch(ModelComponent::TextEncoder);
  const Conditioning c = time_text_encoder(model, o, j);
  end_phase(ModelComponent::TextEncoder);
  model.prefetch(ModelComponent::UNet);
  for (int batch : {2, 1}) time_unet(model, o, c, batch, arena, j);
  record_memory_after_unet(arena, j);
  end_phase(ModelComponent::UNet);
  if (!o.skip_vae) {
    time_vae_decode(model, o, j);
    end_phase(ModelComponent::Vae);
  }
  j["peak_rss_mb"] = peak_rss_bytes() / 1048576.0;
  j["arena_peak_mb"] = arena.peak_bytes_reserved() / 1048576.0;
}

void print_networks(const nlohmann::json& j) {
  std::printf("text encoding (2×77): %.3f s\n", j["text_encode_seconds"].get<double>());
  for (const char* k : {"unet_b2", "unet_b1", "vae_decode"}) {
    if (!j.contains(std::string(k) + "_seconds")) continue;
    std::string calls;  // every call, for the spread around the median
    for (const auto& c : j[std::string(k) + "_call_seconds"]) {
      char t[32];
      std::snprintf(t, sizeof t, "%s%.2f", calls.empty() ? "" : " ", c.get<double>());
      calls += t;
    }
    std::printf("%-11s %8.2f s  %7.1f GFLOP  %6.1f GFLOP/s  %5.1f %% of peak, %5.1f %% of the adjacent peak  "
                "(first call %.2f s; calls: %s s)\n",
                k, j[std::string(k) + "_seconds"].get<double>(), j[std::string(k) + "_gflop"].get<double>(),
                j[std::string(k) + "_gflops"].get<double>(),
                100 * j[std::string(k) + "_fraction_of_peak"].get<double>(),
                100 * j[std::string(k) + "_fraction_of_adjacent_peak"].get<double>(),
                j[std::string(k) + "_first_call_seconds"].get<double>(), calls.c_str());
  }
  if (j.contains("unet_b2_guided_pairs_seconds"))
    std::printf("unet_b2 as guided pairs (a bf16 run's guided calls): %.2f s; with split activations too (its first call): %.2f s\n",
                j["unet_b2_guided_pairs_seconds"].get<double>(), j["unet_b2_split_seconds"].get<double>());
  if (j.contains("img2img")) {
    const nlohmann::json& i = j["img2img"];
    std::printf("img2img strength %g, %d steps (%d UNet calls vs %d): %.2f s, %.2f x text-to-image (%.2f s)\n",
                i["strength"].get<double>(), i["steps"].get<int>(), i["model_calls"].get<int>(),
                i["text_to_image_model_calls"].get<int>(), i["second_call_seconds"].get<double>(),
                i["ratio_to_text_to_image"].get<double>(), i["text_to_image_second_call_seconds"].get<double>());
  }
}

}  // namespace octodiff::bench
