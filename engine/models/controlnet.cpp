#include "models/controlnet.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "io/config_json.h"
#include "kernels/activations.h"
#include "models/distinct_samples.h"

namespace octodiff {
namespace {

using nlohmann::json;

std::string idx(const std::string& prefix, int i) { return prefix + "." + std::to_string(i); }

// The up blocks a UNet with these down blocks has (UNetConfig::from_json wants them).
json mirrored_up_blocks(const json& down) {
  json up = json::array();
  for (auto it = down.rbegin(); it != down.rend(); ++it)
    up.push_back(it->get<std::string>() == "CrossAttnDownBlock2D" ? "CrossAttnUpBlock2D" : "UpBlock2D");
  return up;
}

Conv2d stride2_conv(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, kernels::Precision p) {
  kernels::Conv2dGeometry g;
  g.stride = 2;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
  return Conv2d::load(w, prefix, in, out, 3, g, p);
}

}  // namespace

ControlNetConfig ControlNetConfig::from_json(const std::string& text, const std::string& what) {
  json j = parse_config_object(text, what);
  if (auto it = j.find("_class_name"); it != j.end() && *it != "ControlNetModel")
    fail("'", what, "' describes a ", it->dump(), ", not a ControlNetModel");
  ControlNetConfig c;
  json down = j.contains("down_block_types") ? j["down_block_types"]
                                             : json(UNetConfig().down_block_types);
  if (!down.is_array()) fail("'", what, "': down_block_types must be a list");
  for (const auto& t : down)
    if (!t.is_string()) fail("'", what, "': down_block_types must be a list of names");
  j["down_block_types"] = down;
  j["up_block_types"] = mirrored_up_blocks(down);
  if (!j.contains("cross_attention_dim")) j["cross_attention_dim"] = 1280;  // ControlNetModel's default
  c.unet = UNetConfig::from_json(j.dump(), what);
  c.conditioning_channels = config_value_or(j, "conditioning_channels", 3, what);
  c.conditioning_embedding_out_channels =
      config_value_or(j, "conditioning_embedding_out_channels", c.conditioning_embedding_out_channels, what);
  const std::string order =
      config_value_or<std::string>(j, "controlnet_conditioning_channel_order", "rgb", what);
  if (order != "rgb" && order != "bgr")
    fail("'", what, "': unknown controlnet_conditioning_channel_order '", order, "'");
  c.bgr = order == "bgr";
  if (config_value_or(j, "global_pool_conditions", false, what))
    fail("'", what, "': unsupported model setting global_pool_conditions (a guess-mode ControlNet such as "
         "shuffle)");
  if (c.conditioning_channels < 1 || c.conditioning_channels > 64)
    fail("'", what, "': conditioning_channels must be 1 to 64, got ", c.conditioning_channels);
  const auto& e = c.conditioning_embedding_out_channels;
  if (e.empty() || e.size() > 8) fail("'", what, "': conditioning_embedding_out_channels must have 1 to 8 entries");
  for (int ch : e)
    if (ch <= 0 || ch > 100000) fail("'", what, "': conditioning_embedding_out_channels must be positive");
  return c;
}

int ControlNetConfig::num_down_residuals() const {
  const int levels = static_cast<int>(unet.block_out_channels.size());
  return 1 + levels * unet.layers_per_block + (levels - 1);
}

// What an addition embedding is, for messages.
static std::string addition_embedding_name(const UNetConfig& c) {
  if (!c.text_time()) return "none (SD 1.x/2.x)";
  return cat("\"text_time\" of ", c.projection_class_embeddings_input_dim, " values (SDXL's pooled text and ",
             c.addition_time_embed_dim, "-wide size ids)");
}

std::string ControlNetConfig::mismatch_with(const UNetConfig& u) const {
  auto list = [](const auto& v) { return json(v).dump(); };
  std::vector<std::string> d;
  if (unet.text_time() != u.text_time() ||
      (u.text_time() && (unet.projection_class_embeddings_input_dim != u.projection_class_embeddings_input_dim ||
                         unet.addition_time_embed_dim != u.addition_time_embed_dim)))
    d.push_back(cat("addition embedding ", addition_embedding_name(unet), " vs the UNet's ", addition_embedding_name(u)));
  if (unet.cross_attention_dim != u.cross_attention_dim)
    d.push_back(cat("cross_attention_dim ", unet.cross_attention_dim, " vs the UNet's ", u.cross_attention_dim,
                    " (text embeddings of another width: SD 1.x 768, SD 2.x 1024, SDXL 2048)"));
  if (unet.in_channels != u.in_channels)
    d.push_back(cat("it takes ", unet.in_channels, "-channel latents, the UNet ", u.in_channels));
  if (unet.block_out_channels != u.block_out_channels)
    d.push_back(cat("block_out_channels ", list(unet.block_out_channels), " vs the UNet's ", list(u.block_out_channels)));
  if (unet.layers_per_block != u.layers_per_block)
    d.push_back(cat("layers_per_block ", unet.layers_per_block, " vs the UNet's ", u.layers_per_block));
  if (unet.down_block_types != u.down_block_types)
    d.push_back(cat("down_block_types ", list(unet.down_block_types), " vs the UNet's ", list(u.down_block_types)));
  std::string all;
  for (const std::string& s : d) all += (all.empty() ? "" : "; ") + s;
  return all;
}

ControlNetModel ControlNetModel::load(WeightSource& w, const ControlNetConfig& config, kernels::Precision precision) {
  ControlNetModel m;
  m.config_ = config;
  m.precision_ = precision;
  const UNetConfig& c = config.unet;
  const kernels::ScopedWinogradLimit winograd = unet_winograd_convolutions(c);  // as the UNet's
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t T = c.time_embed_dim();

  m.time_linear_1_ = Linear::load(w, "time_embedding.linear_1", boc[0], T, true, precision);
  m.time_linear_2_ = Linear::load(w, "time_embedding.linear_2", T, T, true, precision);
  if (c.text_time()) m.add_embedding_ = TextTimeEmbedding::load(w, c, precision);  // as the SDXL UNet's
  m.conv_in_ = Conv2d::load_same(w, "conv_in", c.in_channels, boc[0], 3, precision);

  const auto& e = config.conditioning_embedding_out_channels;
  m.cond_in_ = Conv2d::load_same(w, "controlnet_cond_embedding.conv_in", config.conditioning_channels, e[0], 3, precision);
  for (size_t i = 0; i + 1 < e.size(); ++i) {
    const std::string p = "controlnet_cond_embedding.blocks";
    m.cond_blocks_.push_back(Conv2d::load_same(w, idx(p, 2 * i), e[i], e[i], 3, precision));
    m.cond_blocks_.push_back(stride2_conv(w, idx(p, 2 * i + 1), e[i], e[i + 1], precision));
  }
  m.cond_out_ = Conv2d::load_same(w, "controlnet_cond_embedding.conv_out", e.back(), boc[0], 3, precision);

  m.encoder_ = UNetEncoder::load(w, c, precision);  // down_blocks.*, mid_block.*
  // controlnet_down_blocks.K: one 1×1 conv per skip tensor of the down path, in its order.
  std::vector<int64_t> skip_channels{boc[0]};
  for (int i = 0; i < n; ++i) {
    skip_channels.insert(skip_channels.end(), m.encoder_.levels()[i].resnets.size(), boc[i]);
    if (m.encoder_.levels()[i].downsample) skip_channels.push_back(boc[i]);
  }
  for (size_t k = 0; k < skip_channels.size(); ++k)
    m.zero_convs_.push_back(Linear::load(w, idx("controlnet_down_blocks", static_cast<int>(k)), skip_channels[k],
                                         skip_channels[k], true, precision, true));
  const int64_t mid_c = boc[n - 1];
  m.mid_zero_conv_ = Linear::load(w, "controlnet_mid_block", mid_c, mid_c, true, precision, true);
  w.finish();
  return m;
}

Tensor ControlNetModel::embed_condition(const Tensor& cond) const {
  if (cond.rank() != 4 || cond.dim(3) != config_.conditioning_channels)
    fail("ControlNet: the control image batch has shape ", shape_str(cond.shape()), ", expected N × H × W × ",
         config_.conditioning_channels);
  Tensor x = cond;
  if (config_.bgr) {  // torch.flip(controlnet_cond, dims=[1])
    x = Tensor::empty(cond.shape());
    const int64_t C = cond.dim(3), pixels = cond.numel() / C;
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t k = 0; k < C; ++k) x[p * C + k] = cond[p * C + (C - 1 - k)];
  }
  Tensor h = cond_in_(x);
  kernels::silu(h.data(), h.numel(), h.data());
  for (const Conv2d& block : cond_blocks_) {
    h = block(h);
    kernels::silu(h.data(), h.numel(), h.data());
  }
  return cond_out_(h);
}

void ControlNetModel::check_inputs(const Tensor& sample, const std::vector<double>& timesteps, const Tensor& context,
                                   const Tensor& cond) const {
  const UNetConfig& c = config_.unet;
  if (sample.rank() != 4 || sample.dim(3) != c.in_channels)
    fail("ControlNet input has shape ", shape_str(sample.shape()), ", expected N × h × w × ", c.in_channels);
  const int64_t N = sample.dim(0), h = sample.dim(1), w = sample.dim(2), s = config_.image_scale();
  if (h % c.latent_multiple() || w % c.latent_multiple())
    fail("latent size ", h, "×", w, " must be a multiple of ", c.latent_multiple(), " for this ControlNet");
  if (static_cast<int64_t>(timesteps.size()) != N) fail("ControlNet: ", timesteps.size(), " timesteps for batch ", N);
  if (context.rank() != 3 || context.dim(0) != N || context.dim(2) != c.cross_attention_dim)
    fail("ControlNet: text context has shape ", shape_str(context.shape()), ", expected ", N, " × L × ",
         c.cross_attention_dim);
  const Shape expected{N, h * s, w * s, config_.conditioning_channels};
  if (cond.shape() != expected)
    fail("ControlNet: the control image batch has shape ", shape_str(cond.shape()), ", expected ",
         shape_str(expected), " (", s, "× the latent size)");
}

UNetResiduals ControlNetModel::forward_nhwc(const Tensor& sample, const std::vector<double>& timesteps,
                                            const Tensor& context, const Tensor& cond, double conditioning_scale,
                                            const Numerics& numerics, const UNetTextTime* text_time) const {
  check_inputs(sample, timesteps, context, cond);
  return forward_embedded_nhwc(sample, timesteps, context, embed_condition(cond), conditioning_scale, numerics,
                               text_time);
}

Tensor ControlNetModel::time_embedding(const std::vector<double>& timesteps, const UNetTextTime* text_time) const {
  const UNetConfig& c = config_.unet;
  if (c.text_time() != (text_time != nullptr))
    fail(text_time ? "ControlNet: text_embeds and time_ids were given, but this ControlNet has no text_time "
                     "add_embedding (an SD 1.x/2.x ControlNet)"
                   : "ControlNet: this ControlNet (addition_embed_type \"text_time\", SDXL) needs text_embeds and "
                     "time_ids");
  const Tensor t_proj = UNet2DCondition::timestep_embedding(timesteps, c.block_out_channels[0], c.flip_sin_to_cos,
                                                            c.freq_shift);
  Tensor temb = time_linear_1_(t_proj);
  kernels::silu(temb.data(), temb.numel(), temb.data());
  temb = time_linear_2_(temb);
  if (text_time) {  // diffusers: emb = emb + aug_emb
    const Tensor aug = add_embedding_(*text_time, static_cast<int64_t>(timesteps.size()), "ControlNet");
    kernels::add(temb.data(), aug.data(), temb.numel(), temb.data());
  }
  kernels::silu(temb.data(), temb.numel(), temb.data());  // every resnet's first step
  return temb;
}

UNetResiduals ControlNetModel::forward_embedded_nhwc(const Tensor& sample, const std::vector<double>& timesteps,
                                                     const Tensor& context, const Tensor& embedded,
                                                     double conditioning_scale, const Numerics& numerics,
                                                     const UNetTextTime* text_time) const {
  const UNetConfig& c = config_.unet;
  const Shape expected{sample.dim(0), sample.dim(1), sample.dim(2), c.block_out_channels[0]};
  if (sample.rank() != 4 || embedded.shape() != expected)
    fail("ControlNet: the conditioning embedding has shape ", shape_str(embedded.shape()), ", expected ",
         shape_str(expected));
  if (static_cast<int64_t>(timesteps.size()) != sample.dim(0))
    fail("ControlNet: ", timesteps.size(), " timesteps for batch ", sample.dim(0));
  const Tensor temb = time_embedding(timesteps, text_time);

  std::vector<Tensor> skips;
  Tensor x = down_path(sample, embedded, timesteps, temb, context, numerics, skips);
  x = encoder_.mid(x, temb, context, numerics);

  const float scale = static_cast<float>(conditioning_scale);
  UNetResiduals out;
  for (size_t k = 0; k < skips.size(); ++k) {
    Tensor r = zero_convs_[k](skips[k]);
    kernels::scale(r.data(), r.numel(), scale);
    out.down.push_back(std::move(r));
  }
  out.mid = mid_zero_conv_(x);
  kernels::scale(out.mid.data(), out.mid.numel(), scale);
  return out;
}

// conv_in(sample) + embedded, then the down blocks; every skip tensor goes to `skips`. As in the
// UNet, a guided batch's two halves (the same latents, timestep and image) run the layers before
// the first cross-attention once (models/distinct_samples.h: the same bits).
Tensor ControlNetModel::down_path(const Tensor& sample, const Tensor& embedded, const std::vector<double>& timesteps,
                                  const Tensor& temb, const Tensor& context, const Numerics& numerics,
                                  std::vector<Tensor>& skips) const {
  // (A text_time ControlNet's time embedding differs between a guided batch's halves, which
  // would have to be compared too: it shares nothing. SDXL's first level has no attention, so
  // there is nothing to share anyway.)
  const DistinctSamples distinct = distinct_samples(sample, timesteps, &embedded);
  const bool shared = distinct.repeats() && encoder_.can_share_text_free_part() && !config_.unet.text_time();
  Tensor x;
  if (shared) {
    const Tensor embedded_distinct = embedded.gather0(distinct.rows);
    x = conv_in_(sample.gather0(distinct.rows), &embedded_distinct);
  } else {
    x = conv_in_(sample, &embedded);  // conv_in(sample) + cond_embedding(cond)
  }
  return encoder_.down(std::move(x), temb, context, numerics, shared ? &distinct : nullptr, skips);
}

UNetResiduals ControlNetModel::forward(const Tensor& sample, const std::vector<double>& timesteps,
                                       const Tensor& context, const Tensor& cond, double conditioning_scale,
                                       const Numerics& numerics, const UNetTextTime* text_time) const {
  if (sample.rank() != 4 || cond.rank() != 4) fail("ControlNet: sample and control image must be N × C × H × W");
  UNetResiduals r =
      forward_nhwc(to_nhwc(sample), timesteps, context, to_nhwc(cond), conditioning_scale, numerics, text_time);
  for (Tensor& d : r.down) d = to_nchw(d);
  r.mid = to_nchw(r.mid);
  return r;
}

}  // namespace octodiff
