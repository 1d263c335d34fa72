#include "models/unet_2d_condition.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/device.h"
#include "core/error.h"
#include "kernels/activations.h"
#include "kernels/tensor_ops.h"
#include "models/distinct_samples.h"

namespace octodiff {
namespace {

std::string idx(const std::string& prefix, int i) { return prefix + "." + std::to_string(i); }

}  // namespace

UNet2DCondition UNet2DCondition::load(WeightSource& w, const UNetConfig& c, kernels::Precision precision) {
  UNet2DCondition u;
  u.config_ = c;
  u.precision_ = precision;
  const kernels::ScopedWinogradLimit winograd = unet_winograd_convolutions(c);
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t T = c.time_embed_dim(), X = c.cross_attention_dim, G = c.norm_num_groups;
  const float eps = static_cast<float>(c.norm_eps);

  if (c.time_cond_proj_dim > 0)
    u.time_cond_proj_ = Linear::load(w, "time_embedding.cond_proj", c.time_cond_proj_dim, boc[0], false, precision);
  u.time_linear_1_ = Linear::load(w, "time_embedding.linear_1", boc[0], T, true, precision);
  u.time_linear_2_ = Linear::load(w, "time_embedding.linear_2", T, T, true, precision);
  if (c.text_time()) u.add_embedding_ = TextTimeEmbedding::load(w, c, precision);
  u.conv_in_ = Conv2d::load_same(w, "conv_in", c.in_channels, boc[0], 3, precision);

  u.encoder_ = UNetEncoder::load(w, c, precision);  // down_blocks.*, mid_block.*

  const int64_t mid_c = boc[n - 1];
  int64_t prev_c = mid_c;
  for (int i = 0; i < n; ++i) {
    const int r = n - 1 - i;  // the down block this up block mirrors
    const std::string p = idx("up_blocks", i);
    const int64_t up_out = boc[r];
    const int64_t skip_in = boc[std::max(r - 1, 0)];
    UpLevel level;
    const int layers = c.layers_per_block + 1;
    for (int j = 0; j < layers; ++j) {
      const int64_t skip_c = (j == layers - 1) ? skip_in : up_out;
      const int64_t res_in = (j == 0 ? prev_c : up_out) + skip_c;
      level.resnets.push_back(
          ResnetBlock2D::load(w, idx(p + ".resnets", j), res_in, up_out, T, G, eps, precision));
      if (c.up_block_types[i] == "CrossAttnUpBlock2D")
        level.attentions.push_back(Transformer2D::load(w, idx(p + ".attentions", j), up_out, X,
                                                       c.num_heads[r], c.transformer_layers_per_block[r], G,
                                                       c.use_linear_projection, precision));
    }
    if (i < n - 1) level.upsample = Upsample2D::load(w, p + ".upsamplers.0", up_out, precision);
    prev_c = up_out;
    u.up_.push_back(std::move(level));
  }

  u.norm_out_ = GroupNorm::load(w, "conv_norm_out", boc[0], G, eps);
  u.conv_out_ = Conv2d::load_same(w, "conv_out", boc[0], c.out_channels, 3, precision);
  w.finish();
  return u;
}

Tensor UNet2DCondition::timestep_embedding(const std::vector<double>& timesteps, int64_t dim,
                                           bool flip_sin_to_cos, double freq_shift) {
  // diffusers get_timestep_embedding, in float32 step by step:
  //   exponent = -ln(10000) * arange(half) / (half - shift); freq = exp(exponent)
  //   arg = t * freq; emb = [sin(arg), cos(arg)] (flipped to [cos, sin])
  const int64_t half = dim / 2;
  const int64_t N = static_cast<int64_t>(timesteps.size());
  Tensor emb = Tensor::zeros({N, dim});
  const float neg_log = -static_cast<float>(std::log(10000.0));
  const float denom = static_cast<float>(static_cast<double>(half) - freq_shift);
  for (int64_t n = 0; n < N; ++n) {
    const float t = static_cast<float>(timesteps[n]);
    for (int64_t k = 0; k < half; ++k) {
      const float exponent = (neg_log * static_cast<float>(k)) / denom;
      const float arg = t * std::exp(exponent);
      const float s = std::sin(arg), co = std::cos(arg);
      emb[n * dim + k] = flip_sin_to_cos ? co : s;
      emb[n * dim + half + k] = flip_sin_to_cos ? s : co;
    }
  }
  return emb;
}

Tensor lcm_guidance_embedding(const std::vector<double>& guidance_scales, int64_t dim) {
  if (dim < 4 || dim > 1'000'000) fail("LCM guidance embedding: dimension ", dim, " must be at least 4");
  const int64_t half = dim / 2, N = static_cast<int64_t>(guidance_scales.size());
  // torch.log(torch.tensor(10000.0)) / (half_dim - 1), all float32.
  const float step = std::log(10000.0f) / static_cast<float>(half - 1);
  Tensor emb = Tensor::zeros({N, dim});  // the odd dimension's pad column stays 0
  for (int64_t n = 0; n < N; ++n) {
    const float w = static_cast<float>(guidance_scales[n] - 1.0);  // torch.tensor(guidance_scale - 1)
    const float w1000 = w * 1000.0f;
    for (int64_t k = 0; k < half; ++k) {
      const float arg = w1000 * std::exp(static_cast<float>(k) * -step);
      emb[n * dim + k] = std::sin(arg);
      emb[n * dim + half + k] = std::cos(arg);
    }
  }
  return emb;
}

Tensor UNet2DCondition::time_embedding(const Tensor& t_proj, const Tensor* timestep_cond) const {
  Tensor h1;
  if (timestep_cond) {
    Tensor conditioned = time_cond_proj_(*timestep_cond, &t_proj);  // t_proj + cond_proj(timestep_cond)
    h1 = time_linear_1_(conditioned);
  } else {
    h1 = time_linear_1_(t_proj);
  }
  kernels::silu(h1.data(), h1.numel(), h1.data());
  return time_linear_2_(h1);
}

Tensor UNet2DCondition::text_time_embedding(const UNetTextTime& tt, int64_t N) const {
  return add_embedding_(tt, N, "UNet");
}

Tensor UNet2DCondition::forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                                const Numerics& numerics, UNetDebug* debug) const {
  return forward(sample, timesteps, context, nullptr, numerics, debug);
}

Tensor UNet2DCondition::forward(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                                const Tensor* timestep_cond, const Numerics& numerics, UNetDebug* debug,
                                const UNetResiduals* residuals, const UNetTextTime* text_time) const {
  if (sample.rank() != 4 || sample.dim(1) != config_.in_channels)
    fail("UNet input has shape ", shape_str(sample.shape()), ", expected N × ", config_.in_channels, " × h × w");
  return to_nchw(
      forward_nhwc(to_nhwc(sample), timesteps, context, timestep_cond, numerics, debug, residuals, text_time));
}

Tensor UNet2DCondition::forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps,
                                     const Tensor& context, const Numerics& numerics, UNetDebug* debug) const {
  return forward_nhwc(sample, timesteps, context, nullptr, numerics, debug);
}

void UNet2DCondition::check_timestep_cond(const Tensor* timestep_cond, int64_t N) const {
  const int D = config_.time_cond_proj_dim;
  if (D > 0 && !timestep_cond)
    fail("UNet: this UNet has time_cond_proj_dim ", D,
         " (an LCM-distilled UNet) and needs a timestep_cond (the guidance embedding, N × ", D, ")");
  if (D == 0 && timestep_cond)
    fail("UNet: a timestep_cond was given, but this UNet has no time_cond_proj_dim (no "
         "time_embedding.cond_proj)");
  if (timestep_cond && (timestep_cond->rank() != 2 || timestep_cond->dim(0) != N || timestep_cond->dim(1) != D))
    fail("UNet: timestep_cond has shape ", shape_str(timestep_cond->shape()), ", expected ", N, " × ", D);
}

// skips[k] + down[k] as new tensors (the last skip is also the mid block's input, which stays as it is).
static void add_down_residuals(std::vector<Tensor>& skips, const UNetResiduals& residuals) {
  if (residuals.down.size() != skips.size())
    fail("UNet: ", residuals.down.size(), " down-block residuals given; this UNet has ", skips.size(),
         " skip tensors (a ControlNet for another architecture?)");
  for (size_t k = 0; k < skips.size(); ++k) {
    if (residuals.down[k].shape() != skips[k].shape())
      fail("UNet: down-block residual ", k, " has shape ", shape_str(residuals.down[k].shape()), ", the skip tensor is ",
           shape_str(skips[k].shape()));
    Tensor sum = Tensor::empty(skips[k].shape());
    kernels::add(skips[k].data(), residuals.down[k].data(), sum.numel(), sum.data());
    skips[k] = std::move(sum);
  }
}

Tensor UNet2DCondition::forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps,
                                     const Tensor& context, const Tensor* timestep_cond, const Numerics& numerics,
                                     UNetDebug* debug, const UNetResiduals* residuals,
                                     const UNetTextTime* text_time) const {
  const int64_t N = sample.dim(0), h = sample.dim(1), w = sample.dim(2);
  const int m = config_.latent_multiple();
  if (sample.rank() != 4 || sample.dim(3) != config_.in_channels)
    fail("UNet input has shape ", shape_str(sample.shape()), ", expected N × h × w × ", config_.in_channels);
  if (h % m || w % m)
    fail("latent size ", h, "×", w, " must be a multiple of ", m, " for this UNet");
  if (static_cast<int64_t>(timesteps.size()) != N) fail("UNet: ", timesteps.size(), " timesteps for batch ", N);
  if (context.rank() != 3 || context.dim(0) != N || context.dim(2) != config_.cross_attention_dim)
    fail("UNet: text context has shape ", shape_str(context.shape()), ", expected ", N, " × L × ",
         config_.cross_attention_dim);

  check_timestep_cond(timestep_cond, N);
  if (config_.text_time() != (text_time != nullptr))
    fail(text_time ? "UNet: text_embeds and time_ids were given, but this UNet has no text_time add_embedding"
                   : "UNet: this UNet (addition_embed_type \"text_time\", SDXL) needs text_embeds and time_ids");

  const int64_t C0 = config_.block_out_channels[0];
  Tensor t_proj = timestep_embedding(timesteps, C0, config_.flip_sin_to_cos, config_.freq_shift);
  Tensor temb = time_embedding(t_proj, timestep_cond);
  if (debug) {
    debug->time_proj = t_proj;
    debug->time_embedding = temb.clone();
  }
  if (text_time) {  // diffusers: emb = emb + aug_emb
    const Tensor aug = text_time_embedding(*text_time, N);
    kernels::add(temb.data(), aug.data(), temb.numel(), temb.data());
    if (debug) debug->add_embedding = aug;
  }
  // Every resnet applies SiLU to the time embedding first; do it once.
  kernels::silu(temb.data(), temb.numel(), temb.data());

  // Up to the first cross-attention the UNet does not see the text, so samples that repeat an
  // earlier one at the same timestep and time condition (a guided step's two halves) would
  // repeat its computation exactly (their time embeddings are equal too): conv_in, the
  // first resnet and the first transformer's self-attention run on the distinct samples only,
  // then are copied out. Every kernel computes each sample on its own, in the same order
  // whatever the batch, so this changes no bit.
  // (With text_time the time embedding itself tells the samples' conditions apart.)
  const DistinctSamples distinct = distinct_samples(sample, timesteps, text_time ? &temb : timestep_cond);
  const bool shared = distinct.repeats() && encoder_.can_share_text_free_part();
  if (debug) debug->text_free_samples = shared ? static_cast<int64_t>(distinct.rows.size()) : N;

  std::vector<Tensor> skips;
  Tensor x = encoder_.down(shared ? conv_in_(sample.gather0(distinct.rows)) : conv_in_(sample), temb, context,
                           numerics, shared ? &distinct : nullptr, skips);
  if (residuals) add_down_residuals(skips, *residuals);
  x = encoder_.mid(x, temb, context, numerics);
  if (residuals) {
    if (residuals->mid.shape() != x.shape())
      fail("UNet: the mid-block residual has shape ", shape_str(residuals->mid.shape()), ", the mid block's output is ",
           shape_str(x.shape()));
    kernels::add(x.data(), residuals->mid.data(), x.numel(), x.data());
  }
  if (debug) debug->mid_block_out = to_nchw(x);

  for (const UpLevel& level : up_) {
    for (size_t j = 0; j < level.resnets.size(); ++j) {
      check_cancelled();
      Tensor input = concat_channels(x, skips.back());
      // Let go of both halves before the resnet runs: at the 64×64 level they are 30 MB that
      // would otherwise stay live through it.
      skips.pop_back();
      x = Tensor();
      x = level.resnets[j](input, &temb);
      if (!level.attentions.empty()) x = level.attentions[j](x, context, numerics);
    }
    if (level.upsample) x = (*level.upsample)(x);
  }
  return conv_out_(norm_out_(x, /*silu=*/true));
}

}  // namespace octodiff
