// make-random-model's SDXL layouts (models/random_weights.h, the functions the command writes with;
// the single file through io/single_file.h's writer) at tiny-sdxl's configs instead of the full
// size (10+ GB): the random weights written as a diffusers layout (one file per component) and as
// a single file (conditioner.embedders.0/1.*, model.diffusion_model.*, first_stage_model.*) read back
// with every diffusers tensor bit-identical, nothing left over in the file, and each network
// (both text towers, the text_time UNet, the VAE) giving bit-identical outputs from either layout.
#include <gtest/gtest.h>

#include <cstring>

#include "io/files.h"
#include "io/safetensors.h"
#include "io/single_file.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_text_projection.h"
#include "models/random_weights.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

template <typename Config>
Config config_of(const std::string& part) {
  return Config::from_json(read_text_file(sdxl_dir() / part / "config.json"), part + "/config.json");
}

// One component as make-random-model's diffusers layout stores it.
std::shared_ptr<WeightSource> write_component(const fs::path& file, const std::vector<DiffusersTensor>& tensors,
                                              DType dtype) {
  std::vector<TensorToWrite> list;
  for (const auto& t : tensors)
    list.push_back({t.name, dtype, t.shape, [&t, dtype](uint8_t* dst, size_t) {
                      std::vector<float> values(shape_numel(t.shape));
                      t.values(values.data());
                      store_floats(values.data(), static_cast<int64_t>(values.size()), dtype, dst);
                    }});
  write_safetensors(file, list);
  return weights_from_safetensors({file}, file.filename().string());
}

// Every tensor of `diffusers` taken from both sources must be the same bytes; then nothing of
// `single` may be left (finish() throws naming a tensor no loader took).
void expect_same_tensors(const std::string& what, WeightSource& diffusers, WeightSource& single) {
  int compared = 0, differing = 0;
  for (const std::string& name : diffusers.names()) {
    ASSERT_TRUE(single.has(name)) << what << ": the single file has no '" << name << "'";
    const Tensor a = diffusers.take(name, diffusers.shape_of(name));
    const Tensor b = single.take(name, diffusers.shape_of(name));
    if (std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) != 0) {
      ++differing;
      ADD_FAILURE() << what << ": '" << name << "' differs between the layouts";
    }
    ++compared;
  }
  std::printf("[sdxl random single file] %s: %d tensors compared, %d differ\n", what.c_str(), compared, differing);
  EXPECT_GT(compared, 0);
  EXPECT_NO_THROW(single.finish()) << what;
}

void expect_identical(const std::string& label, const Tensor& single, const Tensor& diffusers) {
  ASSERT_EQ(single.shape(), diffusers.shape()) << label;
  const test::Diff d = test::diff(single, diffusers);
  std::printf("[sdxl random single file] %s: max abs difference %.3e (scale %.3e)\n", label.c_str(), d.max_abs,
              d.ref_scale);
  EXPECT_EQ(d.max_abs, 0.0) << label << " should be bit-identical";
}

class SdxlRandomSingleFile : public ::testing::TestWithParam<DType> {};

}  // namespace

TEST_P(SdxlRandomSingleFile, ReadsBackAsTheDiffusersLayoutsWeightsAndNetworks) {
  const DType dtype = GetParam();
  const auto te1_config = config_of<ClipTextConfig>("text_encoder");
  const auto te2_config = config_of<ClipTextConfig>("text_encoder_2");
  const auto unet_config = config_of<UNetConfig>("unet");
  const auto vae_config = config_of<VaeConfig>("vae");
  const RandomModelWeights weights = random_model_weights(unet_config, vae_config, te1_config, &te2_config, 5);
  const fs::path dir = test::temp_dir(std::string("sdxl_random_single_file_") + dtype_name(dtype));
  auto diff_unet = write_component(dir / "unet.safetensors", weights.unet, dtype);
  auto diff_vae = write_component(dir / "vae.safetensors", weights.vae, dtype);
  auto diff_te1 = write_component(dir / "text_encoder.safetensors", weights.text_encoder, dtype);
  auto diff_te2 = write_component(dir / "text_encoder_2.safetensors", weights.text_encoder_2, dtype);
  write_single_file(dir / "model.safetensors",
                    random_single_file_contents(weights, SingleFileCheckpoint::Family::SDXL, 5), dtype);

  SingleFileCheckpoint ck = open_single_file(dir / "model.safetensors");
  EXPECT_EQ(ck.family, SingleFileCheckpoint::Family::SDXL);
  EXPECT_EQ(ck.cross_attention_dim, unet_config.cross_attention_dim);
  EXPECT_TRUE(ck.unrecognized.empty()) << ck.unrecognized.front();
  ASSERT_TRUE(ck.unet && ck.vae && ck.text_encoder && ck.text_encoder_2);
  expect_same_tensors("unet", *diff_unet, *ck.unet);
  expect_same_tensors("vae", *diff_vae, *ck.vae);
  expect_same_tensors("text_encoder", *diff_te1, *ck.text_encoder);
  expect_same_tensors("text_encoder_2", *diff_te2, *ck.text_encoder_2);

  // The networks, loaded afresh from either layout, on tiny-sdxl's golden inputs.
  ck = open_single_file(dir / "model.safetensors");
  auto reopen = [&](const char* name) { return weights_from_safetensors({dir / name}, name); };
  auto g2 = SafetensorsFile::open(sdxl_dir() / "goldens" / "text_encoder_2.safetensors");
  const auto ids64 = g2->to_i64("input_ids");
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const auto te2_single = ClipTextModelWithProjection::load(*ck.text_encoder_2, te2_config).forward(ids, 4, 77);
  const auto te2_diff =
      ClipTextModelWithProjection::load(*reopen("text_encoder_2.safetensors"), te2_config).forward(ids, 4, 77);
  expect_identical("text_encoder_2 penultimate", te2_single.penultimate, te2_diff.penultimate);
  expect_identical("text_encoder_2 text_embeds", te2_single.text_embeds, te2_diff.text_embeds);
  expect_identical("text_encoder penultimate",
                   ClipTextModel::load(*ck.text_encoder, te1_config).forward(ids, 4, 77).penultimate,
                   ClipTextModel::load(*reopen("text_encoder.safetensors"), te1_config).forward(ids, 4, 77).penultimate);

  auto g = SafetensorsFile::open(sdxl_dir() / "goldens" / "unet.safetensors");
  const UNetTextTime tt{g->to_f32("text_embeds"), g->to_f32("time_ids")};
  const double t = static_cast<double>(g->to_i64("timesteps")[0]);
  auto unet_out = [&](WeightSource& w) {
    return UNet2DCondition::load(w, unet_config)
        .forward(g->to_f32("sample"), {t, t}, g->to_f32("encoder_hidden_states"), nullptr, Numerics{Flavour::Diffusers},
                 nullptr, nullptr, &tt);
  };
  expect_identical("unet noise_pred", unet_out(*ck.unet), unet_out(*reopen("unet.safetensors")));
  auto gv = SafetensorsFile::open(sdxl_dir() / "goldens" / "vae.safetensors");
  const Tensor z = gv->to_f32("latents_unscaled");
  expect_identical("vae decode", AutoencoderKL::load(*ck.vae, vae_config).decode(z),
                   AutoencoderKL::load(*reopen("vae.safetensors"), vae_config).decode(z));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SdxlRandomSingleFile, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });
