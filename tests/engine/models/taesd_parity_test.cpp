// AutoencoderTiny (TAESD) against diffusers 0.31 on the tiny random model in tests/data/tiny-taesd
// (made by tools/goldens/make_taesd_goldens.py): decode (raw sample and the pipeline's final
// image) and encode at two sizes, one of them non-square and odd, in float32 and bf16; the final
// images of diffusers' StableDiffusionPipeline with this TAESD as its vae; and the config.json
// settings this engine refuses. Every comparison prints its max abs error.
#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/layers.h"
#include "models/autoencoder_tiny.h"
#include "models/flop_count.h"
#include "models/parameter_catalog.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;
using kernels::Precision;

namespace {

fs::path model_dir() { return test::data_dir() / "tiny-taesd"; }

std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(model_dir() / "goldens" / "taesd.safetensors"); }

AutoencoderTinyConfig tiny_config() {
  return AutoencoderTinyConfig::from_json(read_text_file(model_dir() / "config.json"), "tiny-taesd/config.json");
}

AutoencoderTiny load(Precision precision) {
  auto w = weights_from_safetensors({model_dir() / "diffusion_pytorch_model.safetensors"}, "tiny-taesd");
  return AutoencoderTiny::load(*w, tiny_config(), precision);
}

// Decode and encode at both golden sizes against diffusers, within rel × max(1, scale).
void expect_goldens(const AutoencoderTiny& taesd, const std::string& label, double rel) {
  auto g = goldens();
  for (const char* tag : {"a", "b"}) {
    const std::string t = tag;
    const Tensor latents = to_nhwc(g->to_f32("decode_latents_" + t));
    test::expect_parity(label + " decode sample " + t, to_nchw(taesd.decode_raw_nhwc(latents)),
                        g->to_f32("decode_sample_" + t), rel);
    test::expect_parity(label + " decode pipeline image " + t, taesd.decode_nhwc(latents),
                        g->to_f32("decode_image_" + t), rel);
    const Tensor image = to_nhwc(g->to_f32("encode_image_" + t));
    test::expect_parity(label + " encode latents " + t, to_nchw(taesd.encode_nhwc(image)),
                        g->to_f32("encode_latents_" + t), rel);
  }
}

std::string config_error(const std::string& json) {
  try {
    AutoencoderTinyConfig::from_json(json, "test/config.json");
  } catch (const Error& e) {
    std::printf("[config error] %s\n", e.what());
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TaesdParity, Float32MatchesDiffusers) {
  const AutoencoderTiny taesd = load(Precision::F32);
  EXPECT_TRUE(taesd.has_encoder());
  EXPECT_EQ(taesd.config().decoder_scale_factor(), 8);
  EXPECT_EQ(taesd.config().encoder_scale_factor(), 8);
  expect_goldens(taesd, "f32", 1e-4);
}

TEST(TaesdParity, Bf16NearDiffusersAndDifferentFromFloat32) {
  const AutoencoderTiny bf16 = load(Precision::BF16), f32 = load(Precision::F32);
  EXPECT_EQ(bf16.precision(), Precision::BF16);
  // bf16 keeps 8 significant bits; through TAESD's ~40 convolutions the error reaches about 1 %
  // of the output scale (measured on this model: 0.9-1.1e-2 for decode samples and encoder
  // latents, 0.94-1.04e-2 for the pipeline image — 0.83-0.90e-2 before the upsampling
  // convolutions ran as F(3×3, 2×2) on the un-upsampled image; the full-size random TAESD's
  // 512×512 bf16 images differ from its f32 ones by the same RMS, 2.2e-3, either way): the
  // project's bf16 bar (bf16_test.cpp), 2e-2.
  expect_goldens(bf16, "bf16", 2e-2);
  auto g = goldens();
  const Tensor latents = to_nhwc(g->to_f32("decode_latents_a"));
  const test::Diff d = test::diff(bf16.decode_raw_nhwc(latents), f32.decode_raw_nhwc(latents));
  std::printf("[bf16] taesd decode: bf16 vs our f32 max_abs_diff=%.3e\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-5) << "bf16 products should differ from float32";
}

// The last step of diffusers' StableDiffusionPipeline with this TAESD as its vae (tiny-sd's UNet
// made the latents): the pipeline's output images from its final latents, passed undivided.
TEST(TaesdParity, StableDiffusionPipelineFinalImages) {
  const AutoencoderTiny taesd = load(Precision::F32);
  auto g = SafetensorsFile::open(model_dir() / "goldens" / "pipeline_tiny_sd.safetensors");
  const Tensor latents = to_nhwc(g->to_f32("latents_final"));
  test::expect_parity("f32 pipeline images", taesd.decode_nhwc(latents), g->to_f32("images"), 1e-4);
}

TEST(TaesdParity, ResultsDoNotDependOnThreadCount) {
  const AutoencoderTiny taesd = load(Precision::F32);
  const Tensor latents = to_nhwc(goldens()->to_f32("decode_latents_b"));
  Tensor one, two;
  {
    DeviceScope scope(DeviceContext{0, 1, nullptr});
    one = taesd.decode_nhwc(latents);
  }
  {
    DeviceScope scope(DeviceContext{0, 2, nullptr});
    two = taesd.decode_nhwc(latents);
  }
  for (int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(one[i], two[i]) << "element " << i;
}

// A decoder block keeps at most three activations of its size live (its input for the residual,
// the middle convolution's input and the output): the largest stage's blocks set the decode's
// peak, which a first decode faults in page by page. Measured from a caching arena (what the
// pipeline decodes with) in multiples S of one activation at the output resolution.
TEST(TaesdMemory, DecodeKeepsThreeActivationsOfTheLastStageLive) {
  const AutoencoderTiny taesd = load(Precision::F32);
  const AutoencoderTinyConfig c = tiny_config();
  const int64_t h = 24, w = 20, f = c.decoder_scale_factor();
  const Tensor latents = Tensor::full({1, h, w, c.latent_channels}, 0.25f);
  CachingArena arena;
  {
    AllocatorScope scope(&arena);
    DeviceScope device(DeviceContext{0, 1, nullptr});
    taesd.decode_nhwc(latents);
  }
  const double S = static_cast<double>(h * f * w * f * c.channels() * sizeof(float));
  const double peak = static_cast<double>(arena.peak_bytes_in_use());
  std::printf("[taesd memory] %lldx%lld latents: peak in use %.2f S (S = %.0f bytes)\n", static_cast<long long>(h),
              static_cast<long long>(w), peak / S, S);
  EXPECT_GE(peak, 3.0 * S);  // the three live activations (a lower figure means the count is off)
  EXPECT_LT(peak, 3.5 * S);  // not a fourth (the block's first output kept while its last runs)
}

TEST(TaesdParity, WrongInputShapesAreErrors) {
  const AutoencoderTiny taesd = load(Precision::F32);
  EXPECT_THROW(taesd.decode_nhwc(Tensor::zeros({1, 8, 8, 3})), Error);  // 3 latent channels, not 4
  EXPECT_THROW(taesd.decode_nhwc(Tensor::zeros({4, 8, 8})), Error);
  EXPECT_THROW(taesd.encode_nhwc(Tensor::zeros({1, 64, 64, 4})), Error);
}

TEST(TaesdParity, EncoderTensorsInADecoderOnlySourceAreUnexpected) {
  auto w = weights_from_safetensors({model_dir() / "diffusion_pytorch_model.safetensors"}, "tiny-taesd");
  // The encoder's tensors are then unexpected: a decoder-only source must not hold them.
  EXPECT_THROW(AutoencoderTiny::load(*w, nullptr, tiny_config(), Precision::F32), Error);
}

TEST(TaesdConfig, DefaultsAreTaesd) {
  const AutoencoderTinyConfig c = AutoencoderTinyConfig::from_json("{}", "empty");
  EXPECT_EQ(c.channels(), 64);
  EXPECT_EQ(c.latent_channels, 4);
  EXPECT_EQ(c.scaling_factor, 1.0);
  EXPECT_EQ(c.num_decoder_blocks, (std::vector<int>{3, 3, 3, 1}));
  EXPECT_EQ(c.num_encoder_blocks, (std::vector<int>{1, 3, 3, 3}));
  EXPECT_EQ(c.decoder_scale_factor(), 8);
  const AutoencoderTinyConfig t = tiny_config();
  EXPECT_EQ(t.channels(), 16);
  EXPECT_EQ(t.latent_magnitude, 3.0);
  EXPECT_EQ(t.latent_shift, 0.5);
}

TEST(TaesdConfig, UnsupportedSettingsAreRefusedByName) {
  EXPECT_NE(config_error(R"({"act_fn": "silu"})").find("act_fn 'silu'"), std::string::npos);
  EXPECT_NE(config_error(R"({"upsample_fn": "bilinear"})").find("upsample_fn 'bilinear'"), std::string::npos);
  EXPECT_NE(config_error(R"({"upsampling_scaling_factor": 4})").find("upsampling_scaling_factor 4"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"shift_factor": 0.5})").find("shift_factor"), std::string::npos);
  EXPECT_NE(config_error(R"({"decoder_block_out_channels": [64, 64, 32, 32]})").find("all must be equal"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"encoder_block_out_channels": [64, 64]})").find("num_encoder_blocks"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"block_out_channels": [32, 32, 32, 32]})").find("contradicts"), std::string::npos);
  EXPECT_NE(config_error(R"({"latent_channels": 0})").find("latent_channels"), std::string::npos);
  EXPECT_NE(config_error(R"({"num_decoder_blocks": [3, -1, 3, 1]})").find("num_decoder_blocks"), std::string::npos);
  EXPECT_NE(config_error(R"({"act_fn": 3})").find("act_fn"), std::string::npos);
  EXPECT_NE(config_error("[1, 2]").find("not a JSON object"), std::string::npos);
  // Accepted as diffusers does: the saved copy of the decoder's widths, force_upcast, the class name.
  EXPECT_EQ(config_error(R"({"block_out_channels": [64, 64, 64, 64], "force_upcast": true,
                             "_class_name": "AutoencoderTiny", "latent_channels": 16})"),
            "");
}

TEST(TaesdCatalog, ListsExactlyTheTinyModelsTensors) {
  auto file = SafetensorsFile::open(model_dir() / "diffusion_pytorch_model.safetensors");
  const auto specs = autoencoder_tiny_parameters(tiny_config());
  ASSERT_EQ(specs.size(), file->tensors().size());
  for (const ParameterSpec& p : specs) {
    const TensorRecord* r = file->find(p.name);
    ASSERT_NE(r, nullptr) << p.name;
    EXPECT_EQ(r->shape, p.shape) << p.name;
  }
  // Full-size TAESD: ~1.2 M parameters per half (spec/fast-sampling.md §3).
  const AutoencoderTinyConfig full;
  const int64_t decoder = parameter_count(autoencoder_tiny_parameters(full, /*with_encoder=*/false));
  const int64_t both = parameter_count(autoencoder_tiny_parameters(full));
  std::printf("[taesd] parameters: decoder %lld, encoder %lld\n", static_cast<long long>(decoder),
              static_cast<long long>(both - decoder));
  EXPECT_NEAR(static_cast<double>(decoder), 1.2e6, 0.1e6);
  EXPECT_NEAR(static_cast<double>(both - decoder), 1.2e6, 0.1e6);
}

TEST(TaesdFlops, FullSizeAt512) {
  const AutoencoderTinyConfig c;
  auto conv = [](double pixels, double ci, double co) { return 2 * pixels * ci * co * 9; };
  const double r64 = 64 * 64, r128 = 128 * 128, r256 = 256 * 256, r512 = 512 * 512;
  // Decoder: conv_in, 3 blocks (9 convs) at 64²; each later resolution one upsampling conv and
  // 9 convs, 3 at 512² (one block), then conv_out to RGB.
  const double decode = conv(r64, 4, 64) + 9 * conv(r64, 64, 64) + 10 * conv(r128, 64, 64) +
                        10 * conv(r256, 64, 64) + 4 * conv(r512, 64, 64) + conv(r512, 64, 3);
  // Encoder: conv_in and one block at 512², then a stride-2 conv and 3 blocks per resolution.
  const double encode = conv(r512, 3, 64) + 3 * conv(r512, 64, 64) + 10 * conv(r256, 64, 64) +
                        10 * conv(r128, 64, 64) + 10 * conv(r64, 64, 64) + conv(r64, 64, 4);
  EXPECT_DOUBLE_EQ(taesd_decode_flops(c, 1, 64, 64), decode);
  EXPECT_DOUBLE_EQ(taesd_encode_flops(c, 1, 512, 512), encode);
  EXPECT_DOUBLE_EQ(taesd_decode_flops(c, 2, 64, 64), 2 * decode);
  std::printf("[taesd] 512x512: decode %.1f GFLOP, encode %.1f GFLOP\n", decode / 1e9, encode / 1e9);
  EXPECT_NEAR(decode / 2e9, 71, 1);  // ≈ 71 GMAC (spec/fast-sampling.md §3)
}
