#include "models/autoencoder_kl.h"

#include "core/device.h"
#include "core/error.h"
#include "kernels/conv2d.h"
#include "kernels/tensor_ops.h"
#include "models/tiled_layers.h"

namespace octodiff {
namespace {

constexpr float kVaeEps = 1e-6f;  // every VAE GroupNorm (diffusers hard-codes it)

std::string idx(const std::string& prefix, int i) { return prefix + "." + std::to_string(i); }

}  // namespace

AutoencoderKL::Coder AutoencoderKL::load_mid(WeightSource& w, const std::string& p, const VaeConfig& c,
                                             Coder coder, kernels::Precision precision) {
  const int64_t C = c.block_out_channels.back(), G = c.norm_num_groups;
  coder.mid_resnet_0 = ResnetBlock2D::load(w, p + ".mid_block.resnets.0", C, C, 0, G, kVaeEps, precision);
  if (c.mid_block_add_attention)
    coder.mid_attention = VaeAttention::load(w, p + ".mid_block.attentions.0", C, G, precision);
  coder.mid_resnet_1 = ResnetBlock2D::load(w, p + ".mid_block.resnets.1", C, C, 0, G, kVaeEps, precision);
  return coder;
}

AutoencoderKL AutoencoderKL::load(WeightSource& w, const VaeConfig& c, bool with_encoder,
                                  kernels::Precision precision) {
  AutoencoderKL vae;
  vae.config_ = c;
  vae.precision_ = precision;
  // Float32 3×3 convolutions as Winograd F(4×4, 3×3) (conv2d.h): SD's VAE decoder 1.4× faster
  // (median 6.9 → 4.9 s at 512×512 on Emerald Rapids) for 0.4 GB more packed weight; its images
  // within 1.7e-5 of the direct convolutions' (bench/results, "Winograd F(4×4, 3×3)").
  const kernels::ScopedLargeWinogradTiles large_tiles(kernels::kEveryWinogradConv);
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const int64_t G = c.norm_num_groups, L = c.latent_channels;

  // Decoder.
  Coder dec;
  if (c.use_post_quant_conv)
    vae.post_quant_conv_ = Linear::load(w, "post_quant_conv", L, L, true, precision, true);
  dec.conv_in = Conv2d::load_same(w, "decoder.conv_in", L, boc[n - 1], 3, precision);
  dec = load_mid(w, "decoder", c, std::move(dec), precision);
  int64_t prev = boc[n - 1];
  for (int i = 0; i < n; ++i) {
    const std::string p = idx("decoder.up_blocks", i);
    const int64_t out = boc[n - 1 - i];
    Level level;
    for (int j = 0; j < c.layers_per_block + 1; ++j)
      level.resnets.push_back(
          ResnetBlock2D::load(w, idx(p + ".resnets", j), j == 0 ? prev : out, out, 0, G, kVaeEps, precision));
    if (i < n - 1) level.upsample = Upsample2D::load(w, p + ".upsamplers.0", out, precision);
    prev = out;
    dec.levels.push_back(std::move(level));
  }
  dec.norm_out = GroupNorm::load(w, "decoder.conv_norm_out", boc[0], G, kVaeEps);
  dec.conv_out = Conv2d::load_same(w, "decoder.conv_out", boc[0], c.out_channels, 3, precision);
  vae.decoder_ = std::move(dec);

  // Encoder (optional: text-to-image never needs it).
  if (with_encoder && w.has("encoder.conv_in.weight")) {
    Coder enc;
    enc.conv_in = Conv2d::load_same(w, "encoder.conv_in", c.in_channels, boc[0], 3, precision);
    int64_t in = boc[0];
    for (int i = 0; i < n; ++i) {
      const std::string p = idx("encoder.down_blocks", i);
      Level level;
      for (int j = 0; j < c.layers_per_block; ++j)
        level.resnets.push_back(ResnetBlock2D::load(w, idx(p + ".resnets", j), j == 0 ? in : boc[i], boc[i],
                                                    0, G, kVaeEps, precision));
      if (i < n - 1)
        level.downsample = load_downsample(w, p + ".downsamplers.0", boc[i], /*padding=*/0, precision);
      in = boc[i];
      enc.levels.push_back(std::move(level));
    }
    enc = load_mid(w, "encoder", c, std::move(enc), precision);
    enc.norm_out = GroupNorm::load(w, "encoder.conv_norm_out", boc[n - 1], G, kVaeEps);
    enc.conv_out = Conv2d::load_same(w, "encoder.conv_out", boc[n - 1], 2 * L, 3, precision);
    if (c.use_quant_conv)
      vae.quant_conv_ = Linear::load(w, "quant_conv", 2 * L, 2 * L, true, precision, true);
    vae.encoder_ = std::move(enc);
  } else {
    for (const auto& name : w.names())
      if (name.rfind("encoder.", 0) == 0 || name.rfind("quant_conv.", 0) == 0) w.ignore(name);
  }
  w.finish();
  return vae;
}

Tensor AutoencoderKL::run_mid(const Coder& coder, Tensor x) const {
  x = coder.mid_resnet_0(x, nullptr);
  if (coder.mid_attention) x = (*coder.mid_attention)(x);
  return coder.mid_resnet_1(x, nullptr);
}

Tensor AutoencoderKL::decode_mid_nhwc(const Tensor& z) const {
  if (z.rank() != 4 || z.dim(3) != config_.latent_channels)
    fail("VAE decoder input has shape ", shape_str(z.shape()), ", expected N × h × w × ", config_.latent_channels);
  Tensor x = post_quant_conv_ ? (*post_quant_conv_)(z) : z;
  x = decoder_.conv_in(x);
  check_cancelled();
  return run_mid(decoder_, x);
}

Tensor AutoencoderKL::decode_up_nhwc(const Tensor& mid) const {
  if (mid.rank() != 4 || mid.dim(3) != config_.block_out_channels.back())
    fail("VAE up blocks' input has shape ", shape_str(mid.shape()), ", expected N × h × w × ",
         config_.block_out_channels.back());
  Tensor x = mid;
  for (const Level& level : decoder_.levels) {
    for (const auto& r : level.resnets) {
      check_cancelled();
      x = r(x, nullptr);
    }
    if (level.upsample) x = (*level.upsample)(x);
  }
  return decoder_.conv_out(decoder_.norm_out(x, /*silu=*/true));
}

Tensor AutoencoderKL::decode_up_in_tiles_nhwc(Tensor x, int64_t tile, const ActivationScratch* scratch) const {
  if (x.rank() != 4 || x.dim(3) != config_.block_out_channels.back())
    fail("VAE up blocks' input has shape ", shape_str(x.shape()), ", expected N × h × w × ",
         config_.block_out_channels.back());
  for (const Level& level : decoder_.levels) {
    for (const auto& r : level.resnets) x = resnet_in_tiles(r, std::move(x), tile, scratch);
    if (level.upsample) x = upsample_in_tiles(*level.upsample, x, tile, scratch);
  }
  const GroupNorm& norm = decoder_.norm_out;
  const GroupStatistics stats = whole_group_statistics(x, norm.groups, norm.eps, scratch);
  const Tensor image = norm_silu_conv_in_tiles(x, norm, stats, decoder_.conv_out, tile, scratch);
  return scratch ? image.clone() : image;  // the image outlives the scratch files
}

Tensor AutoencoderKL::decode_nhwc(const Tensor& z) const { return decode_up_nhwc(decode_mid_nhwc(z)); }

Tensor AutoencoderKL::decode(const Tensor& z) const {
  if (z.rank() != 4) fail("VAE decoder input must be N × C × h × w, got ", shape_str(z.shape()));
  return to_nchw(decode_nhwc(to_nhwc(z)));
}

Tensor AutoencoderKL::encode_moments(const Tensor& image) const {
  if (!encoder_) fail("this VAE was loaded without its encoder");
  if (image.rank() != 4 || image.dim(1) != config_.in_channels)
    fail("VAE encoder input has shape ", shape_str(image.shape()), ", expected N × ", config_.in_channels, " × H × W");
  const int64_t m = config_.scale_factor();
  if (image.dim(2) % m || image.dim(3) % m)
    fail("image size ", image.dim(2), "×", image.dim(3), " must be a multiple of ", m);
  const Coder& enc = *encoder_;
  Tensor x = enc.conv_in(to_nhwc(image));
  for (const Level& level : enc.levels) {
    for (const auto& r : level.resnets) {
      check_cancelled();
      x = r(x, nullptr);
    }
    if (level.downsample) x = (*level.downsample)(x);
  }
  x = run_mid(enc, x);
  x = enc.conv_out(enc.norm_out(x, /*silu=*/true));
  if (quant_conv_) x = (*quant_conv_)(x);
  return to_nchw(x);
}

}  // namespace octodiff
