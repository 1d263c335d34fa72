// CLIP image preprocessing (preprocess/clip_image_processor.h) and PIL's bicubic resize
// (io/image.h) against goldens computed with PIL 9.4 (Image.resize(..., Image.BICUBIC)) and
// transformers' rescale/normalize steps, by tools/goldens/make_tiny_safety_checker.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "preprocess/clip_image_processor.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path data() { return test::data_dir() / "tiny-safety-checker"; }

// A golden (H, W, 3) tensor of byte values as an image.
Image8 image_of(const Tensor& t) {
  Image8 img{static_cast<int>(t.dim(1)), static_cast<int>(t.dim(0)), {}};
  for (int64_t i = 0; i < t.numel(); ++i) img.rgb.push_back(static_cast<uint8_t>(t.data()[i]));
  return img;
}

// (3, H, W) → (1, H, W, 3)
Tensor chw_to_nhwc(const Tensor& chw) {
  const int64_t C = chw.dim(0), H = chw.dim(1), W = chw.dim(2);
  Tensor out = Tensor::empty({1, H, W, C});
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < H * W; ++i) out.data()[i * C + c] = chw.data()[c * H * W + i];
  return out;
}

int max_byte_diff(const Image8& a, const Image8& b) {
  int worst = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) worst = std::max(worst, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return worst;
}

}  // namespace

TEST(ClipImageProcessor, BicubicResizeIsPilsExactly) {
  auto g = SafetensorsFile::open(data() / "goldens" / "clip_preprocess_224.safetensors");
  for (const char* c : {"a", "b"}) {
    const Image8 src = image_of(g->to_f32(std::string("src_") + c));
    const Image8 want = image_of(g->to_f32(std::string("resized_") + c));
    const Image8 got = resize_bicubic(src, want.width, want.height);
    ASSERT_EQ(got.width, want.width);
    ASSERT_EQ(got.height, want.height);
    const int worst = max_byte_diff(got, want);
    std::printf("[clip] PIL bicubic %dx%d -> %dx%d: max byte difference %d\n", src.width, src.height, want.width,
                want.height, worst);
    EXPECT_EQ(worst, 0);
  }
}

TEST(ClipImageProcessor, PixelValuesAt224MatchTheReference) {
  auto g = SafetensorsFile::open(data() / "goldens" / "clip_preprocess_224.safetensors");
  const ClipImageProcessor p;  // CLIP's defaults: 224, bicubic, OpenAI mean/std
  for (const char* c : {"a", "b"}) {
    const Image8 src = image_of(g->to_f32(std::string("src_") + c));
    EXPECT_EQ(p.resize_and_crop(src).width, 224);
    test::expect_parity(std::string("clip pixel_values ") + c, p({src}), chw_to_nhwc(g->to_f32(std::string("pixel_values_") + c)),
                        1e-6);
  }
}

TEST(ClipImageProcessor, TinyCheckersInputFromItsPreprocessorConfig) {
  const ClipImageProcessor p = ClipImageProcessor::from_json(
      read_text_file(data() / "feature_extractor" / "preprocessor_config.json"), "preprocessor_config.json");
  EXPECT_EQ(p.shortest_edge, 28);
  EXPECT_EQ(p.crop_width, 28);
  auto g = SafetensorsFile::open(data() / "goldens" / "safety_checker.safetensors");
  const Tensor squares = g->to_f32("images_u8");  // N × 64 × 64 × 3
  const Tensor clip_input = g->to_f32("clip_input");  // (N + 1) × 3 × 28 × 28; the last: the wide image
  const int64_t n = squares.dim(0);
  for (int64_t i = 0; i <= n; ++i) {
    const Tensor src = i < n ? squares.slice0(i, i + 1).reshaped({64, 64, 3}) : g->to_f32("image_wide_u8");
    const Tensor want = chw_to_nhwc(clip_input.slice0(i, i + 1).reshaped({3, 28, 28}));
    test::expect_parity("tiny clip_input " + std::to_string(i), p({image_of(src)}), want, 1e-6);
  }
}

TEST(ClipImageProcessor, ConfigsOutsideTheCheckersPathAreRefused) {
  EXPECT_THROW(ClipImageProcessor::from_json(R"({"resample": 2})", "pc.json"), Error);  // bilinear
  EXPECT_THROW(ClipImageProcessor::from_json(R"({"size": {"height": 224, "width": 224}})", "pc.json"), Error);
  EXPECT_THROW(ClipImageProcessor::from_json(R"({"image_std": [0.2, 0.0, 0.3]})", "pc.json"), Error);
  EXPECT_THROW(ClipImageProcessor::from_json(R"({"image_mean": [0.2]})", "pc.json"), Error);
  try {
    ClipImageProcessor::from_json("{not json", "feature_extractor/preprocessor_config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("feature_extractor/preprocessor_config.json"), std::string::npos);
  }
  // The SD checker's own (older) file: numbers for size and crop_size.
  const auto p = ClipImageProcessor::from_json(R"({"crop_size": 224, "size": 224, "resample": 3,
      "do_center_crop": true, "do_normalize": true, "do_resize": true,
      "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]})",
                                               "sd");
  EXPECT_EQ(p.shortest_edge, 224);
  EXPECT_EQ(p.crop_height, 224);
}

TEST(ClipImageProcessor, ACropLargerThanTheResizedImageIsAnError) {
  ClipImageProcessor p;
  p.do_resize = false;
  Image8 small{10, 10, std::vector<uint8_t>(300, 7)};
  EXPECT_THROW(p({small}), Error);
}
