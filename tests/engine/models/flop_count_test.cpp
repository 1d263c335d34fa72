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
