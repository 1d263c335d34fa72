#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"

using namespace octodiff;

TEST(Tensor, ShapesAndViews) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (int i = 0; i < 24; ++i) t[i] = static_cast<float>(i);
  Tensor r = t.reshaped({6, 4});
  EXPECT_EQ(r.data(), t.data());
  Tensor s = t.slice0(1, 2);
  EXPECT_EQ(s.numel(), 12);
  EXPECT_EQ(s[0], 12.0f);
  Tensor c = t.clone();
  c[0] = 99;
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_THROW(t.reshaped({5, 5}), Error);
  EXPECT_THROW(t.slice0(1, 3), Error);
  Tensor g = t.gather0({1, 0, 1});
  ASSERT_EQ(g.shape(), (Shape{3, 3, 4}));
  EXPECT_NE(g.data(), t.data());
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(g[i], t[12 + i]);
    EXPECT_EQ(g[12 + i], t[i]);
    EXPECT_EQ(g[24 + i], t[12 + i]);
  }
  EXPECT_EQ(t.gather0({}).numel(), 0);
  EXPECT_THROW(t.gather0({2}), Error);
  EXPECT_THROW(t.gather0({-1}), Error);
  EXPECT_THROW(Tensor::empty({-1, 2}), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}), Error);
}

TEST(Half, Float16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << "f16 bits " << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);           // rounds up to infinity
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
}

TEST(Half, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}
