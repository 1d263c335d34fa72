#include "models/flop_count.h"

#include <cmath>
#include <vector>

namespace octodiff {
namespace {

double conv(double pixels, double ci, double co, double k = 3) { return 2 * pixels * co * ci * k * k; }
double linear(double rows, double in, double out) { return 2 * rows * in * out; }
double attention(double q_len, double kv_len, double channels) { return 2 * 2 * q_len * kv_len * channels; }

double resnet(double pixels, double ci, double co, double temb) {
  double f = conv(pixels, ci, co) + conv(pixels, co, co) + linear(1, temb, co);
  if (ci != co) f += linear(pixels, ci, co);
  return f;
}

double transformer(double pixels, double C, double context_len, double X, int depth) {
  double f = 2 * linear(pixels, C, C);  // proj_in, proj_out
  for (int d = 0; d < depth; ++d) {
    f += linear(pixels, C, 3 * C) + attention(pixels, pixels, C) + linear(pixels, C, C);           // self
    f += linear(pixels, C, C) + linear(context_len, X, 2 * C) + attention(pixels, context_len, C)  // cross
         + linear(pixels, C, C);
    f += linear(pixels, C, 8 * C) + linear(pixels, 4 * C, C);  // GEGLU feed-forward
  }
  return f;
}

// The time embedding (with LCM's cond_proj and SDXL's text_time), conv_in, the down blocks and
// the mid block (UNetEncoder) of one sample; *pixels becomes the last level's, *skips gets the
// channels of every skip tensor.
double encoder_flops(const UNetConfig& c, double* pixels, double L, std::vector<double>* skips) {
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const double T = c.time_embed_dim(), X = c.cross_attention_dim;
  double f = conv(*pixels, c.in_channels, boc[0]) + linear(1, boc[0], T) + linear(1, T, T);
  if (c.time_cond_proj_dim > 0) f += linear(1, c.time_cond_proj_dim, boc[0]);  // LCM's cond_proj
  if (c.text_time()) f += linear(1, c.projection_class_embeddings_input_dim, T) + linear(1, T, T);  // SDXL
  double ch = boc[0];
  skips->push_back(ch);
  for (int i = 0; i < n; ++i) {
    const bool attn = c.down_block_types[i] == "CrossAttnDownBlock2D";
    for (int j = 0; j < c.layers_per_block; ++j) {
      f += resnet(*pixels, ch, boc[i], T);
      ch = boc[i];
      if (attn) f += transformer(*pixels, ch, L, X, c.transformer_layers_per_block[i]);
      skips->push_back(ch);
    }
    if (i < n - 1) {
      *pixels /= 4;
      f += conv(*pixels, ch, ch);
      skips->push_back(ch);
    }
  }
  return f + 2 * resnet(*pixels, ch, ch, T) + transformer(*pixels, ch, L, X, c.transformer_layers_per_block[n - 1]);
}

}  // namespace

double unet_flops(const UNetConfig& c, int64_t batch, int64_t h, int64_t w, int64_t L) {
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  const double T = c.time_embed_dim(), X = c.cross_attention_dim;
  double pixels = static_cast<double>(h) * w;
  std::vector<double> skips;
  double f = encoder_flops(c, &pixels, static_cast<double>(L), &skips);
  double prev = boc[n - 1];
  for (int i = 0; i < n; ++i) {
    const int r = n - 1 - i;
    const bool attn = c.up_block_types[i] == "CrossAttnUpBlock2D";
    for (int j = 0; j < c.layers_per_block + 1; ++j) {
      const double skip = skips.back();
      skips.pop_back();
      f += resnet(pixels, (j == 0 ? prev : boc[r]) + skip, boc[r], T);
      if (attn) f += transformer(pixels, boc[r], L, X, c.transformer_layers_per_block[r]);
    }
    prev = boc[r];
    if (i < n - 1) {
      pixels *= 4;
      f += conv(pixels, prev, prev);
    }
  }
  f += conv(pixels, boc[0], c.out_channels);
  return f * static_cast<double>(batch);
}

double unet_text_free_flops(const UNetConfig& c, int64_t h, int64_t w) {
  const auto& boc = c.block_out_channels;
  if (boc.empty() || c.down_block_types[0] != "CrossAttnDownBlock2D") return 0;
  const double pixels = static_cast<double>(h) * w, C = boc[0];
  return conv(pixels, c.in_channels, C) + resnet(pixels, C, C, c.time_embed_dim()) + linear(pixels, C, C) +
         linear(pixels, C, 3 * C) + attention(pixels, pixels, C) + linear(pixels, C, C);
}

double controlnet_flops(const UNetConfig& c, const std::vector<int>& embedding_channels, int conditioning_channels,
                        int64_t batch, int64_t h, int64_t w, int64_t L) {
  const double latent_pixels = static_cast<double>(h) * w;
  double pixels = latent_pixels;
  std::vector<double> skips;
  double f = encoder_flops(c, &pixels, static_cast<double>(L), &skips);
  // The conditioning embedding, from the image (2^(levels − 1) × the latent size) down to it.
  const auto& e = embedding_channels;
  double image_pixels = latent_pixels * std::pow(4.0, static_cast<double>(e.size()) - 1);
  f += conv(image_pixels, conditioning_channels, e[0]);
  for (size_t i = 0; i + 1 < e.size(); ++i) {
    f += conv(image_pixels, e[i], e[i]);
    image_pixels /= 4;
    f += conv(image_pixels, e[i], e[i + 1]);  // stride 2
  }
  f += conv(latent_pixels, e.back(), c.block_out_channels[0]);
  // The 1×1 zero convolutions: one per skip tensor at its level's size, one on the mid block's output.
  const auto& boc = c.block_out_channels;
  double level_pixels = latent_pixels;
  f += linear(level_pixels, boc[0], boc[0]);  // conv_in's skip
  for (size_t i = 0; i < boc.size(); ++i) {
    f += c.layers_per_block * linear(level_pixels, boc[i], boc[i]);
    if (i + 1 < boc.size()) {
      level_pixels /= 4;
      f += linear(level_pixels, boc[i], boc[i]);  // the downsampler's
    }
  }
  f += linear(level_pixels, boc.back(), boc.back());
  return f * static_cast<double>(batch);
}

double vae_decode_flops(const VaeConfig& c, int64_t batch, int64_t h, int64_t w) {
  const auto& boc = c.block_out_channels;
  const int n = static_cast<int>(boc.size());
  double pixels = static_cast<double>(h) * w;
  const double L = c.latent_channels, C = boc[n - 1];
  double f = linear(pixels, L, L) + conv(pixels, L, C);
  f += 2 * resnet(pixels, C, C, 0) - 2 * linear(1, 0, C);
  if (c.mid_block_add_attention) f += 4 * linear(pixels, C, C) + attention(pixels, pixels, C);
  double prev = C;
  for (int i = 0; i < n; ++i) {
    const double out = boc[n - 1 - i];
    for (int j = 0; j < c.layers_per_block + 1; ++j) {
      f += resnet(pixels, j == 0 ? prev : out, out, 0);
      prev = out;
    }
    if (i < n - 1) {
      pixels *= 4;
      f += conv(pixels, out, out);
    }
  }
  f += conv(pixels, boc[0], c.out_channels);
  return f * static_cast<double>(batch);
}

double taesd_decode_flops(const AutoencoderTinyConfig& c, int64_t batch, int64_t h, int64_t w) {
  const double C = c.channels(), k = c.upsampling_scaling_factor;
  double pixels = static_cast<double>(h) * w;
  double f = conv(pixels, c.latent_channels, C);
  const size_t stages = c.num_decoder_blocks.size();
  for (size_t s = 0; s < stages; ++s) {
    f += 3 * c.num_decoder_blocks[s] * conv(pixels, C, C);
    if (s + 1 < stages) {
      pixels *= k * k;
      f += conv(pixels, C, C);
    } else {
      f += conv(pixels, C, c.out_channels);
    }
  }
  return f * static_cast<double>(batch);
}

double taesd_encode_flops(const AutoencoderTinyConfig& c, int64_t batch, int64_t H, int64_t W) {
  const double C = c.encoder_block_out_channels.front();
  double h = static_cast<double>(H), w = static_cast<double>(W);
  double f = conv(h * w, c.in_channels, C);
  for (size_t s = 0; s < c.num_encoder_blocks.size(); ++s) {
    if (s > 0) {
      h = std::ceil(h / 2);
      w = std::ceil(w / 2);
      f += conv(h * w, C, C);
    }
    f += 3 * c.num_encoder_blocks[s] * conv(h * w, C, C);
  }
  f += conv(h * w, C, c.latent_channels);
  return f * static_cast<double>(batch);
}

double clip_text_flops(const ClipTextConfig& c, int64_t batch, int64_t length) {
  const double H = c.hidden_size, F = c.intermediate_size, L = static_cast<double>(length);
  double per_layer = linear(L, H, 3 * H) + attention(L, L, H) / 2 /* causal */ + linear(L, H, H) +
                     linear(L, H, F) + linear(L, F, H);
  return per_layer * c.num_hidden_layers * static_cast<double>(batch);
}

}  // namespace octodiff
