#include <gtest/gtest.h>

#include <cstdio>

#include "models/flop_count.h"

using namespace octodiff;

TEST(FlopCount, MatchesTheSd15FiguresBenchmarksUse) {
  // SD 1.5 at 512×512: the UNet is 803 GFLOP per image (1606 per guided step) and the VAE
  // decoder 2515 GFLOP, counting every conv, projection and attention product.
  const double unet = unet_flops(UNetConfig::sd1(), 1, 64, 64) / 1e9;
  const double guided = unet_flops(UNetConfig::sd1(), 2, 64, 64) / 1e9;
  const double vae = vae_decode_flops(VaeConfig::sd(), 1, 64, 64) / 1e9;
  const double clip = clip_text_flops(ClipTextConfig::sd1(), 1, 77) / 1e9;
  std::printf("[flops] SD1.5 UNet %.2f GFLOP/image, guided step %.2f, VAE decode %.2f, text encoder %.2f\n", unet,
              guided, vae, clip);
  EXPECT_NEAR(unet, 803.27, 0.01);
  EXPECT_NEAR(guided, 1606.55, 0.01);
  EXPECT_NEAR(vae, 2514.52, 0.01);
  EXPECT_GT(clip, 5.0);
  EXPECT_LT(clip, 20.0);
}

TEST(FlopCount, TheTextFreePartASharedSampleSaves) {
  // SD 1.5 at 64×64 latents, written out by hand: conv_in (4 → 320), the first resnet (two 3×3
  // convs 320 → 320 and its 1280 → 320 time projection), proj_in, the q/k/v projections, the
  // 4096-token self-attention at 320 channels and its output projection.
  const double P = 64.0 * 64.0, C = 320;
  const double by_hand = 2 * P * 4 * C * 9 + 2 * (2 * P * C * C * 9) + 2 * 1280 * C + 2 * P * C * C +
                         2 * P * C * 3 * C + 2 * 2 * P * P * C + 2 * P * C * C;
  const double got = unet_text_free_flops(UNetConfig::sd1(), 64, 64);
  std::printf("[flops] SD1.5 UNet text-free first layers: %.2f GFLOP per shared sample\n", got / 1e9);
  EXPECT_DOUBLE_EQ(got, by_hand);
  UNetConfig no_attention = UNetConfig::sd1();
  no_attention.down_block_types[0] = "DownBlock2D";
  EXPECT_EQ(unet_text_free_flops(no_attention, 64, 64), 0.0);
}

TEST(FlopCount, SdxlUNetWithItsTextTimeEmbedding) {
  // SDXL base: the general count (checked on SD 1.5 above) over its three levels, transformer
  // depths 1/2/10 and 2048-wide context, plus add_embedding (2816 → 1280 → 1280, once per image).
  const UNetConfig xl = UNetConfig::sdxl();
  UNetConfig without = xl;
  without.addition_embed_type.clear();
  EXPECT_DOUBLE_EQ(unet_flops(xl, 1, 128, 128) - unet_flops(without, 1, 128, 128),
                   2.0 * 2816 * 1280 + 2.0 * 1280 * 1280);
  const double at1024 = unet_flops(xl, 1, 128, 128) / 1e9, at512 = unet_flops(xl, 1, 64, 64) / 1e9;
  std::printf("[flops] SDXL UNet %.2f GFLOP/image at 1024x1024 (guided step %.2f), %.2f at 512x512\n", at1024,
              2 * at1024, at512);
  EXPECT_NEAR(at1024, 6761.24, 0.01);  // the figure benchmarks divide by
  EXPECT_GT(at1024, 4 * at512);        // self-attention grows with the square of the tokens
  EXPECT_EQ(unet_text_free_flops(xl, 128, 128), 0.0);  // no attention at the first level: nothing shared
}

TEST(FlopCount, AControlNetIsTheEncoderHalfPlusItsImageEmbeddingAndZeroConvs) {
  // A one-level model written out by hand: 2×2 latents, 32 channels, 1 layer, no down-block
  // attention, cross_attention_dim 8, a 1-token context; conditioning embedding (4, 8): a 4×4 image.
  UNetConfig c = UNetConfig::sd1();
  c.block_out_channels = {32};
  c.down_block_types = {"DownBlock2D"};
  c.up_block_types = {"UpBlock2D"};
  c.layers_per_block = 1;
  c.cross_attention_dim = 8;
  c.transformer_layers_per_block = {1};
  const double P = 4, C = 32, T = 128;
  auto conv = [](double px, double ci, double co) { return 2 * px * ci * co * 9; };
  auto lin = [](double rows, double in, double out) { return 2 * rows * in * out; };
  auto resnet = [&](double px) { return 2 * conv(px, C, C) + lin(1, T, C); };
  const double transformer = 2 * lin(P, C, C) + lin(P, C, 3 * C) + 4 * P * P * C + lin(P, C, C) + lin(P, C, C) +
                             lin(1, 8, 2 * C) + 4 * P * 1 * C + lin(P, C, C) + lin(P, C, 8 * C) + lin(P, 4 * C, C);
  const double encoder = conv(P, 4, C) + lin(1, C, T) + lin(1, T, T) + resnet(P) + 2 * resnet(P) + transformer;
  const double image = conv(16, 3, 4) + conv(16, 4, 4) + conv(4, 4, 8) + conv(4, 8, C);
  const double zero = 3 * lin(P, C, C);  // conv_in's skip, the resnet's, the mid block's
  const double got = controlnet_flops(c, {4, 8}, 3, 2, 2, 2, 1);
  EXPECT_DOUBLE_EQ(got, 2 * (encoder + image + zero));
  // SDXL's text_time embedding is counted as the UNet's.
  UNetConfig xl = c;
  xl.addition_embed_type = "text_time";
  xl.projection_class_embeddings_input_dim = 40;
  EXPECT_DOUBLE_EQ(controlnet_flops(xl, {4, 8}, 3, 1, 2, 2, 1) - controlnet_flops(c, {4, 8}, 3, 1, 2, 2, 1),
                   lin(1, 40, T) + lin(1, T, T));
  // Full size, per image (diffusers' conditioning embedding (16, 32, 96, 256), 77 tokens).
  const double sd15 = controlnet_flops(UNetConfig::sd1(), {16, 32, 96, 256}, 3, 1, 64, 64) / 1e9;
  const double sdxl = controlnet_flops(UNetConfig::sdxl(), {16, 32, 96, 256}, 3, 1, 128, 128) / 1e9;
  std::printf("[flops] ControlNet per image: SD 1.5 at 512x512 %.2f GFLOP (UNet %.2f), SDXL at 1024x1024 %.2f "
              "GFLOP (UNet %.2f)\n",
              sd15, unet_flops(UNetConfig::sd1(), 1, 64, 64) / 1e9, sdxl, unet_flops(UNetConfig::sdxl(), 1, 128, 128) / 1e9);
}
