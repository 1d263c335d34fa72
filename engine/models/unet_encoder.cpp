#include "models/unet_encoder.h"

#include <algorithm>
#include <string>

#include "core/device.h"

namespace octodiff {
namespace {

std::string idx(const std::string& prefix, int i) { return prefix + "." + std::to_string(i); }

}  // namespace

// The two upper levels, in f32 and bf16 (their weights grow 16/9: +200 MB for SD 1.5 in f32; the
// 1280-channel levels would add 0.8 GB, and in bf16 they were no faster: an SD-Turbo UNet call
// 1.83 s as here against 1.86 s with them, +0.7 GiB; bench/results, session 26). In bf16 the second
// level came first (a guided SD 1.5 step 6–10 % faster for +77 MB); the first, which then gained
// nothing measurable, joined it once the Winograd transforms had been reworked (session 25, Zen 4:
// 2 × 64² × 320 → 320 in 19.3–19.6 ms against 37.6–39.0 ms direct; a guided SD 1.5 step 4.11–4.20 →
// 3.73–3.94 s, an SD-Turbo UNet call 1.96–2.15 → 1.85–1.92 s; peak RSS +20 MB). Rounding
// transformed tiles to bf16 costs more accuracy than the direct kernel's rounding: the tiny
// goldens' bf16 images moved 3–5 % further from f32 on average (tests/engine/pipeline/bf16_test.cpp
// and image_to_image_test.cpp give the figures).
kernels::ScopedWinogradLimit unet_winograd_convolutions(const UNetConfig& c) {
  const auto& boc = c.block_out_channels;
  const int64_t level2 = boc[std::min<size_t>(1, boc.size() - 1)];
  return kernels::ScopedWinogradLimit(level2, 0);
}

UNetEncoder UNetEncoder::load(WeightSource& w, const UNetConfig& c, kernels::Precision precision) {
  UNetEncoder e;
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t T = c.time_embed_dim(), X = c.cross_attention_dim, G = c.norm_num_groups;
  const float eps = static_cast<float>(c.norm_eps);
  int64_t out_c = boc[0];
  for (int i = 0; i < n; ++i) {
    const std::string p = idx("down_blocks", i);
    const int64_t in_c = out_c;
    out_c = boc[i];
    UNetDownLevel level;
    for (int j = 0; j < c.layers_per_block; ++j) {
      level.resnets.push_back(
          ResnetBlock2D::load(w, idx(p + ".resnets", j), j == 0 ? in_c : out_c, out_c, T, G, eps, precision));
      if (c.down_block_types[i] == "CrossAttnDownBlock2D")
        level.attentions.push_back(Transformer2D::load(w, idx(p + ".attentions", j), out_c, X, c.num_heads[i],
                                                       c.transformer_layers_per_block[i], G,
                                                       c.use_linear_projection, precision));
    }
    if (i < n - 1)
      level.downsample = load_downsample(w, p + ".downsamplers.0", out_c, c.downsample_padding, precision);
    e.levels_.push_back(std::move(level));
  }
  const int64_t mid_c = boc[n - 1];
  e.mid_resnet_0_ = ResnetBlock2D::load(w, "mid_block.resnets.0", mid_c, mid_c, T, G, eps, precision);
  e.mid_attention_ = Transformer2D::load(w, "mid_block.attentions.0", mid_c, X, c.num_heads[n - 1],
                                         c.transformer_layers_per_block[n - 1], G, c.use_linear_projection, precision);
  e.mid_resnet_1_ = ResnetBlock2D::load(w, "mid_block.resnets.1", mid_c, mid_c, T, G, eps, precision);
  return e;
}

Tensor UNetEncoder::down(Tensor x, const Tensor& temb, const Tensor& context, const Numerics& numerics,
                         const DistinctSamples* shared, std::vector<Tensor>& skips) const {
  skips.push_back(shared ? x.gather0(shared->slot) : x);
  for (size_t i = 0; i < levels_.size(); ++i) {
    const UNetDownLevel& level = levels_[i];
    for (size_t j = 0; j < level.resnets.size(); ++j) {
      check_cancelled();
      if (shared && i == 0 && j == 0) {  // the text-free part on the distinct rows, then copied out
        const Tensor temb_distinct = temb.gather0(shared->rows);
        x = level.resnets[0](x, &temb_distinct);
        const Tensor tokens = level.attentions[0].text_free_part(x, numerics).gather0(shared->slot);
        x = level.attentions[0].after_text_free_part(x.gather0(shared->slot), tokens, context, numerics);
      } else {
        x = level.resnets[j](x, &temb);
        if (!level.attentions.empty()) x = level.attentions[j](x, context, numerics);
      }
      skips.push_back(x);
    }
    if (level.downsample) {
      x = (*level.downsample)(x);
      skips.push_back(x);
    }
  }
  return x;
}

Tensor UNetEncoder::mid(const Tensor& x, const Tensor& temb, const Tensor& context, const Numerics& numerics) const {
  check_cancelled();
  Tensor h = mid_resnet_0_(x, &temb);
  h = mid_attention_(h, context, numerics);
  return mid_resnet_1_(h, &temb);
}

}  // namespace octodiff
