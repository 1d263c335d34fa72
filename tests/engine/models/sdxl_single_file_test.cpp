// SDXL single-file (ldm) checkpoints: tests/data/tiny-sdxl/single_file/tiny_sdxl.safetensors holds
// the tiny SDXL's weights as diffusers' own converter (scripts/convert_diffusers_to_original_sdxl.py)
// writes them: conditioner.embedders.0/1.*, model.diffusion_model.* (label_emb), first_stage_model.*.
// Read back through io/single_file.h, every component loads completely (WeightSource::finish) and
// reproduces the goldens at the parity bar.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/single_file.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_projection.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

SingleFileCheckpoint open_tiny() { return open_single_file(sdxl_dir() / "single_file" / "tiny_sdxl.safetensors"); }

template <typename Config>
Config config_of(const std::string& part) {
  return Config::from_json(read_text_file(sdxl_dir() / part / "config.json"), part + "/config.json");
}

std::vector<int32_t> ids_of(const SafetensorsFile& g, const std::string& name) {
  auto v = g.to_i64(name);
  return std::vector<int32_t>(v.begin(), v.end());
}

}  // namespace

TEST(SdxlSingleFile, IsRecognisedWithBothTextTowers) {
  const SingleFileCheckpoint ck = open_tiny();
  EXPECT_EQ(ck.family, SingleFileCheckpoint::Family::SDXL);
  EXPECT_EQ(ck.cross_attention_dim, 80);
  ASSERT_TRUE(ck.unet && ck.vae && ck.text_encoder && ck.text_encoder_2);
  EXPECT_TRUE(ck.unrecognized.empty());
}

TEST(SdxlSingleFile, TextEncodersMatchTheGoldens) {
  const SingleFileCheckpoint ck = open_tiny();
  const ClipTextModel te1 = ClipTextModel::load(*ck.text_encoder, config_of<ClipTextConfig>("text_encoder"));
  auto g1 = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "text_encoder.safetensors");
  test::expect_parity("single-file text_encoder penultimate", te1.forward(ids_of(*g1, "input_ids"), 3, 77).penultimate,
                      g1->to_f32("penultimate_hidden_state"));
  const ClipTextModelWithProjection te2 =
      ClipTextModelWithProjection::load(*ck.text_encoder_2, config_of<ClipTextConfig>("text_encoder_2"));
  auto g2 = SafetensorsFile::open(sdxl_dir() / "goldens" / "text_encoder_2.safetensors");
  const ClipTextProjectionOutput out = te2.forward(ids_of(*g2, "input_ids"), 4, 77);
  test::expect_parity("single-file text_encoder_2 penultimate", out.penultimate, g2->to_f32("penultimate_hidden_state"));
  test::expect_parity("single-file text_encoder_2 text_embeds", out.text_embeds, g2->to_f32("text_embeds"));
}

TEST(SdxlSingleFile, UNetAndVaeMatchTheGoldens) {
  const SingleFileCheckpoint ck = open_tiny();
  const UNet2DCondition unet = UNet2DCondition::load(*ck.unet, config_of<UNetConfig>("unet"));
  auto g = SafetensorsFile::open(sdxl_dir() / "goldens" / "unet.safetensors");
  const UNetTextTime tt{g->to_f32("text_embeds"), g->to_f32("time_ids")};
  const double t = static_cast<double>(g->to_i64("timesteps")[0]);
  const Tensor out = unet.forward(g->to_f32("sample"), {t, t}, g->to_f32("encoder_hidden_states"), nullptr,
                                  Numerics{Flavour::Diffusers}, nullptr, nullptr, &tt);
  const Tensor noise = g->to_f32("noise_pred");
  test::expect_parity("single-file unet noise_pred", out, noise.slice0(0, 1).reshaped(out.shape()));
  const AutoencoderKL vae = AutoencoderKL::load(*ck.vae, config_of<VaeConfig>("vae"));
  auto gv = SafetensorsFile::open(sdxl_dir() / "goldens" / "vae.safetensors");
  test::expect_parity("single-file vae decode", vae.decode(gv->to_f32("latents_unscaled")), gv->to_f32("decoded"));
}

// The v_pred and ztsnr markers (io/single_file.h) on an SDXL file (NoobAI-XL-style v-prediction,
// zero-SNR fine-tunes): the tiny SDXL file copied tensor by tensor with the markers added reads as
// v-prediction and zero SNR; without them, as epsilon.
TEST(SdxlSingleFile, VPredAndZtsnrMarkersAreRead) {
  const auto source = SafetensorsFile::open(sdxl_dir() / "single_file" / "tiny_sdxl.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const TensorRecord& rec : source->tensors())
    tensors.push_back({rec.name, rec.dtype, rec.shape,
                       [source, &rec](uint8_t* dst, size_t n) { std::memcpy(dst, source->bytes(rec), n); }});
  for (const char* marker : {"v_pred", "ztsnr"})
    tensors.push_back({marker, DType::F32, {0}, [](uint8_t*, size_t) {}});
  const fs::path path = test::temp_dir("sdxl_markers") / "tiny_sdxl_vpred_ztsnr.safetensors";
  write_safetensors(path, tensors);
  const SingleFileCheckpoint marked = open_single_file(path);
  EXPECT_EQ(marked.family, SingleFileCheckpoint::Family::SDXL);
  EXPECT_TRUE(marked.v_prediction);
  EXPECT_TRUE(marked.zero_snr);
  EXPECT_TRUE(marked.unrecognized.empty());
  const SingleFileCheckpoint plain = open_tiny();
  EXPECT_FALSE(plain.v_prediction);
  EXPECT_FALSE(plain.zero_snr);
}
