#include "models/autoencoder_tiny.h"

#include <cmath>

#include "core/device.h"
#include "core/error.h"
#include "kernels/activations.h"
#include "kernels/conv2d.h"

namespace octodiff {
namespace {

constexpr kernels::Conv2dGeometry kStride2Pad1{2, 1, 1, 1, 1};  // nn.Conv2d(k=3, stride=2, padding=1)

std::string layer_name(const char* half, size_t index) { return cat(half, ".layers.", index); }

void relu_in_place(Tensor& x) { kernels::relu(x.data(), x.numel(), x.data()); }

}  // namespace

// relu(conv4(relu(conv2(relu(conv0(x))))) + x), each ReLU in its convolution's output pass. The
// first output is released as the second is assigned, so at most three activations of the block's
// size are live (x, h and the output: 192 MB at 512×512, not 256).
Tensor AutoencoderTiny::Block::operator()(const Tensor& x) const {
  Tensor h = conv0(x, nullptr, /*relu=*/true);
  h = conv2(h, nullptr, /*relu=*/true);
  return conv4(h, /*residual=*/&x, /*relu=*/true);
}

// DecoderTiny.__init__'s list, in its order (the index of each entry names its weights).
// An AutoencoderTinyBlock of width C at `name` (name.conv.{0,2,4}).
AutoencoderTiny::Layer AutoencoderTiny::load_block(WeightSource& w, const std::string& name, int64_t C,
                                                   kernels::Precision p) {
  Layer l;
  l.kind = Layer::Kind::Block;
  l.block.conv0 = Conv2d::load_same(w, name + ".conv.0", C, C, 3, p);
  l.block.conv2 = Conv2d::load_same(w, name + ".conv.2", C, C, 3, p);
  l.block.conv4 = Conv2d::load_same(w, name + ".conv.4", C, C, 3, p);
  return l;
}

std::vector<AutoencoderTiny::Layer> AutoencoderTiny::load_decoder(WeightSource& w, const AutoencoderTinyConfig& c,
                                                                  kernels::Precision p) {
  const int64_t C = c.channels();
  std::vector<Layer> layers;
  // after_upsample: the Upsample2x before it runs inside this convolution (run()).
  auto add_conv = [&](int64_t in, int64_t out, bool bias, bool after_upsample) {
    Layer l;
    l.kind = Layer::Kind::Conv;
    const std::string name = layer_name("decoder", layers.size());
    l.conv = after_upsample ? Conv2d::load_after_upsample(w, name, in, out, p, bias)
                            : Conv2d::load_same(w, name, in, out, 3, p, bias);
    layers.push_back(std::move(l));
  };
  auto add = [&](Layer::Kind kind) { layers.push_back(Layer{kind, {}, {}}); };

  add_conv(c.latent_channels, C, true, false);
  add(Layer::Kind::Relu);
  const size_t stages = c.num_decoder_blocks.size();
  for (size_t s = 0; s < stages; ++s) {
    for (int b = 0; b < c.num_decoder_blocks[s]; ++b) {
      layers.push_back(load_block(w, layer_name("decoder", layers.size()), C, p));
    }
    const bool last = s + 1 == stages;
    if (!last) add(Layer::Kind::Upsample2x);
    add_conv(C, last ? c.out_channels : C, /*bias=*/last, /*after_upsample=*/!last);
  }
  return layers;
}

// EncoderTiny.__init__'s list, in its order.
std::vector<AutoencoderTiny::Layer> AutoencoderTiny::load_encoder(WeightSource& w, const AutoencoderTinyConfig& c,
                                                                  kernels::Precision p) {
  const int64_t C = c.encoder_block_out_channels.front();
  std::vector<Layer> layers;
  auto add_conv = [&](int64_t in, int64_t out, kernels::Conv2dGeometry geometry, bool bias) {
    Layer l;
    l.kind = Layer::Kind::Conv;
    l.conv = Conv2d::load(w, layer_name("encoder", layers.size()), in, out, 3, geometry, p, bias);
    layers.push_back(std::move(l));
  };
  for (size_t s = 0; s < c.num_encoder_blocks.size(); ++s) {
    if (s == 0)
      add_conv(c.in_channels, C, kernels::Conv2dGeometry::same(3), true);
    else
      add_conv(C, C, kStride2Pad1, /*bias=*/false);
    for (int b = 0; b < c.num_encoder_blocks[s]; ++b) {
      layers.push_back(load_block(w, layer_name("encoder", layers.size()), C, p));
    }
  }
  add_conv(C, c.latent_channels, kernels::Conv2dGeometry::same(3), true);
  return layers;
}

AutoencoderTiny AutoencoderTiny::load(WeightSource& decoder, WeightSource* encoder, const AutoencoderTinyConfig& c,
                                      kernels::Precision precision) {
  c.validate("AutoencoderTiny config");
  AutoencoderTiny taesd;
  taesd.config_ = c;
  taesd.precision_ = precision;
  // Float32 3×3 convolutions as Winograd F(4×4, 3×3) (conv2d.h): 64 channels, a small weight.
  const kernels::ScopedLargeWinogradTiles large_tiles(kernels::kEveryWinogradConv);
  taesd.decoder_ = load_decoder(decoder, c, precision);
  if (encoder) taesd.encoder_ = load_encoder(*encoder, c, precision);
  decoder.finish();
  if (encoder && encoder != &decoder) encoder->finish();
  return taesd;
}

AutoencoderTiny AutoencoderTiny::load(WeightSource& w, const AutoencoderTinyConfig& c, kernels::Precision precision) {
  const bool with_encoder = w.has("encoder.layers.0.weight");
  return load(w, with_encoder ? &w : nullptr, c, precision);
}

Tensor AutoencoderTiny::run(const std::vector<Layer>& layers, Tensor x) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    check_cancelled();
    switch (layer.kind) {
      case Layer::Kind::Conv:          // a ReLU right after it runs in its output pass
      case Layer::Kind::Upsample2x: {  // always followed by its convolution, which upsamples (load_decoder)
        const bool upsample = layer.kind == Layer::Kind::Upsample2x;
        const Conv2d& conv = upsample ? layers.at(++i).conv : layer.conv;
        const bool relu = i + 1 < layers.size() && layers[i + 1].kind == Layer::Kind::Relu;
        x = upsample ? conv.upsampled(x, nullptr, relu) : conv(x, nullptr, relu);
        i += relu ? 1 : 0;
        break;
      }
      case Layer::Kind::Relu: relu_in_place(x); break;
      case Layer::Kind::Block:
        x = layer.block(x);
        break;
    }
  }
  return x;
}

Tensor AutoencoderTiny::decode_raw_nhwc(const Tensor& latents) const {
  if (latents.rank() != 4 || latents.dim(3) != config_.latent_channels || latents.numel() == 0)
    fail("tiny autoencoder decoder input has shape ", shape_str(latents.shape()), ", expected N × h × w × ",
         config_.latent_channels);
  Tensor x = Tensor::empty(latents.shape());
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = std::tanh(latents[i] / 3.0f) * 3.0f;  // DecoderTiny's clamp
  x = run(decoder_, std::move(x));
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = x[i] * 2.0f - 1.0f;  // [0, 1] → [-1, 1]
  return x;
}

Tensor AutoencoderTiny::decode_nhwc(const Tensor& latents) const {
  Tensor image = decode_raw_nhwc(latents);
  for (int64_t i = 0; i < image.numel(); ++i) {  // VaeImageProcessor.denormalize: (x / 2 + 0.5).clamp(0, 1)
    const float v = image[i] / 2.0f + 0.5f;
    image[i] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
  }
  return image;
}

Tensor AutoencoderTiny::encode_nhwc(const Tensor& images) const {
  if (!has_encoder()) fail("this tiny autoencoder was loaded without its encoder");
  if (images.rank() != 4 || images.dim(3) != config_.in_channels || images.numel() == 0)
    fail("tiny autoencoder encoder input has shape ", shape_str(images.shape()), ", expected N × H × W × ",
         config_.in_channels);
  Tensor x = Tensor::empty(images.shape());
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = (images[i] + 1.0f) / 2.0f;  // EncoderTiny: x.add(1).div(2)
  return run(encoder_, std::move(x));
}

}  // namespace octodiff
