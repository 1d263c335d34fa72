#include "controlnet.h"

#include <cstdio>

#include "bench_timing.h"
#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "models/flop_count.h"

namespace octodiff::bench {

nlohmann::json run_controlnet_bench(const StableDiffusionModel& model, const ControlNetModel& cn,
                                    const ControlNetBenchOptions& o) {
  const UNetConfig& uc = model.unet().config();
  if (const std::string m = cn.config().mismatch_with(uc); !m.empty()) fail("the ControlNet does not fit the model: ", m);
  if (cn.precision() != model.unet().precision()) fail("the ControlNet and the model were loaded for different dtypes");
  const int vsf = model.vae_scale_factor();
  const int64_t h = o.height / vsf, w = o.width / vsf;
  if (h * vsf != o.height || w * vsf != o.width || h * cn.config().image_scale() != o.height)
    fail("size ", o.width, "x", o.height, " does not fit the model (VAE scale ", vsf, ") and the ControlNet");
  DeviceScope scope(DeviceContext{0, o.threads, nullptr});
  CachingArena arena;
  AllocatorScope arena_scope(&arena);
  const kernels::ScopedBf16Activations activations(kernels::Bf16Activations::Rounded);
  const Numerics numerics{Flavour::Flax};

  const Tensor latents = pseudo_random({1, h, w, uc.in_channels}, 7);
  Tensor x = Tensor::empty({2, h, w, uc.in_channels});
  for (int n = 0; n < 2; ++n) std::copy(latents.begin(), latents.end(), x.data() + n * latents.numel());
  const Tensor context = pseudo_random({2, 77, uc.cross_attention_dim}, 11);
  Tensor image = pseudo_random({2, o.height, o.width, 3}, 13);
  for (float& v : image) v = 0.5f * (v + 1.0f);  // [0, 1]
  const std::vector<double> t(2, 500.0);
  // SDXL: pooled text embeddings and the default time ids (h, w, 0, 0, h, w), for both networks.
  UNetTextTime text_time;
  if (uc.text_time()) {
    const int ids = 6, pooled = uc.projection_class_embeddings_input_dim - ids * uc.addition_time_embed_dim;
    if (pooled <= 0) fail("the model's add_embedding takes no pooled text embedding beside ", ids, " time ids");
    text_time.text_embeds = pseudo_random({2, pooled}, 17);
    text_time.time_ids = Tensor::empty({2, ids});
    for (int n = 0; n < 2; ++n) {
      const float row[] = {float(o.height), float(o.width), 0, 0, float(o.height), float(o.width)};
      std::copy(row, row + ids, text_time.time_ids.data() + n * ids);
    }
  }
  const UNetTextTime* tt = uc.text_time() ? &text_time : nullptr;

  const ControlNetConfig& cc = cn.config();
  const double cn_flops = controlnet_flops(cc.unet, cc.conditioning_embedding_out_channels, cc.conditioning_channels,
                                           2, h, w);
  const double unet_gflop = unet_flops(uc, 2, h, w) / 1e9;
  nlohmann::json j = {{"height", o.height}, {"width", o.width}, {"batch", 2}, {"threads", o.threads},
                      {"down_residuals", cn.config().num_down_residuals()}, {"text_time", uc.text_time()},
                      {"controlnet_b2_gflop", cn_flops / 1e9}, {"unet_b2_gflop", unet_gflop}};
  auto timed = [&](const std::string& key, const std::function<void()>& fn) {
    std::vector<double> calls;
    std::fprintf(stderr, "controlnet bench: %s...\n", key.c_str());
    const double s = steady_median_seconds(o.repeats, fn, &calls);
    j[key + "_seconds"] = s;
    j[key + "_first_call_seconds"] = calls.front();
    j[key + "_call_seconds"] = calls;
    return s;
  };
  UNetResiduals residuals;
  const double unet =
      timed("unet_b2", [&] { model.unet().forward_nhwc(x, t, context, nullptr, numerics, nullptr, nullptr, tt); });
  const double net =
      timed("controlnet_b2", [&] { residuals = cn.forward_nhwc(x, t, context, image, 1.0, numerics, tt); });
  const double with = timed("unet_b2_with_residuals", [&] {
    model.unet().forward_nhwc(x, t, context, nullptr, numerics, nullptr, &residuals, tt);
  });
  j["unet_b2_gflops"] = unet_gflop / unet;
  j["controlnet_b2_gflops"] = cn_flops / 1e9 / net;
  j["controlnet_to_unet_flops_ratio"] = cn_flops / 1e9 / unet_gflop;
  j["guided_step_with_controlnet_seconds"] = net + with;
  j["controlnet_to_unet_ratio"] = net / unet;
  j["step_slowdown"] = (net + with) / unet;
  return j;
}

void print_controlnet_bench(const nlohmann::json& c) {
  std::printf("ControlNet at %dx%d, batch 2 (a guided step), %d threads:\n", c["width"].get<int>(),
              c["height"].get<int>(), c["threads"].get<int>());
  std::printf("  UNet alone                %.3f s (first call %.3f s)\n", c["unet_b2_seconds"].get<double>(),
              c["unet_b2_first_call_seconds"].get<double>());
  std::printf("  ControlNet                %.3f s (first call %.3f s) = %.2f x the UNet\n",
              c["controlnet_b2_seconds"].get<double>(), c["controlnet_b2_first_call_seconds"].get<double>(),
              c["controlnet_to_unet_ratio"].get<double>());
  std::printf("  analytic work             UNet %.1f GFLOP (%.1f GFLOP/s), ControlNet %.1f GFLOP (%.1f GFLOP/s) = "
              "%.2f x the UNet's\n",
              c["unet_b2_gflop"].get<double>(), c["unet_b2_gflops"].get<double>(), c["controlnet_b2_gflop"].get<double>(),
              c["controlnet_b2_gflops"].get<double>(), c["controlnet_to_unet_flops_ratio"].get<double>());
  std::printf("  UNet with its residuals   %.3f s\n", c["unet_b2_with_residuals_seconds"].get<double>());
  std::printf("  guided step + ControlNet  %.3f s = %.2f x a plain guided step\n",
              c["guided_step_with_controlnet_seconds"].get<double>(), c["step_slowdown"].get<double>());
}

}  // namespace octodiff::bench
