// Parameter catalogs: equal to the tiny model's files, reproduce the spec's full-size checksums,
// and agree with the loaders (a model written from a catalog loads, and finish() finds nothing
// left over). Also: small models with SD's full block structure survive the single-file layout
// with bit-identical outputs, which exercises the ldm numbering of 4-level UNets.
#include "models/parameter_catalog.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/device.h"
#include "core/error.h"
#include "io/files.h"
#include "io/single_file.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

std::map<std::string, std::string> as_map(const std::vector<ParameterSpec>& specs) {
  std::map<std::string, std::string> m;
  for (const auto& s : specs)
    EXPECT_TRUE(m.emplace(s.name, shape_str(s.shape)).second) << "duplicate " << s.name;
  return m;
}

std::map<std::string, std::string> file_map(const fs::path& path) {
  std::map<std::string, std::string> m;
  auto file = SafetensorsFile::open(path);
  for (const auto& t : file->tensors())
    if (t.name != "text_model.embeddings.position_ids") m[t.name] = shape_str(t.shape);
  return m;
}

void expect_same_sets(const std::map<std::string, std::string>& catalog,
                      const std::map<std::string, std::string>& file, const std::string& label) {
  for (const auto& [name, shape] : file) {
    auto it = catalog.find(name);
    if (it == catalog.end())
      ADD_FAILURE() << label << ": catalog lacks " << name;
    else
      EXPECT_EQ(it->second, shape) << label << ": " << name;
  }
  for (const auto& [name, shape] : catalog)
    if (!file.count(name)) ADD_FAILURE() << label << ": catalog has extra " << name;
  EXPECT_EQ(catalog.size(), file.size()) << label;
}

fs::path tiny(const std::string& rel) {
  return test::tiny_sd_dir() / rel;
}

UNetConfig tiny_unet_config() {
  return UNetConfig::from_json(read_text_file(tiny("unet/config.json")), "unet");
}
VaeConfig tiny_vae_config() {
  return VaeConfig::from_json(read_text_file(tiny("vae/config.json")), "vae");
}
ClipTextConfig tiny_text_config() {
  return ClipTextConfig::from_json(read_text_file(tiny("text_encoder/config.json")), "text");
}

// Small widths, but SD's full structure: 4 levels, 2 resnets each, attention on levels 0..2.
UNetConfig sd_shaped_unet(bool sd2) {
  UNetConfig c = sd2 ? UNetConfig::sd2(true) : UNetConfig::sd1();
  c.block_out_channels = {32, 64, 64, 64};
  c.cross_attention_dim = 48;
  c.num_heads = sd2 ? std::vector<int>{2, 4, 4, 4} : std::vector<int>{4, 4, 4, 4};
  return c;
}
VaeConfig sd_shaped_vae() {
  VaeConfig c = VaeConfig::sd();
  c.block_out_channels = {32, 64, 64, 64};
  return c;
}
ClipTextConfig small_text(bool sd2) {
  ClipTextConfig c = sd2 ? ClipTextConfig::sd2() : ClipTextConfig::sd1();
  c.vocab_size = 1000;
  c.hidden_size = 48;
  c.intermediate_size = 96;
  c.num_attention_heads = 4;
  c.num_hidden_layers = sd2 ? 5 : 3;
  return c;
}

// A catalog as tensors to write, values from the synthetic generator.
std::vector<DiffusersTensor> synthetic(const std::vector<ParameterSpec>& specs, uint64_t seed) {
  std::vector<DiffusersTensor> out;
  for (const auto& s : specs)
    out.push_back({s.name, s.shape, [s, seed](float* dst) { synthetic_parameter_values(s, seed, dst); }});
  return out;
}

void write_diffusers(const fs::path& path, const std::vector<DiffusersTensor>& tensors) {
  std::vector<TensorToWrite> list;
  for (const auto& t : tensors)
    list.push_back({t.name, DType::F32, t.shape,
                    [&t](uint8_t* dst, size_t) { t.values(reinterpret_cast<float*>(dst)); }});
  write_safetensors(path, list);
}

Tensor random_tensor(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  synthetic_values("input", shape, seed, t.data());
  for (float& v : t) v *= std::sqrt(static_cast<float>(t.numel() / shape[0]));  // ~unit variance
  return t;
}

void expect_identical(const Tensor& a, const Tensor& b, const std::string& label) {
  ASSERT_EQ(a.shape(), b.shape()) << label;
  bool finite = true;
  for (float v : a) finite = finite && std::isfinite(v);
  EXPECT_TRUE(finite) << label;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()))
      << label << " differs between layouts";
}

}  // namespace

TEST(ParameterCatalog, TinyModelCatalogsEqualItsFiles) {
  expect_same_sets(as_map(unet_parameters(tiny_unet_config())),
                   file_map(tiny("unet/diffusion_pytorch_model.safetensors")), "unet");
  expect_same_sets(as_map(vae_parameters(tiny_vae_config())),
                   file_map(tiny("vae/diffusion_pytorch_model.safetensors")), "vae");
  expect_same_sets(as_map(clip_text_parameters(tiny_text_config())),
                   file_map(tiny("text_encoder/model.safetensors")), "text encoder");
}

TEST(ParameterCatalog, FullSizeChecksumsMatchTheSpec) {
  struct Case {
    const char* label;
    std::vector<ParameterSpec> specs;
    size_t tensors;
    int64_t params;
  };
  // SD2 text encoder (not in the spec): 23 layers × (4 projections (H²+H) + 2 norms 2H + fc1 (HF+F)
  // + fc2 (FH+H)) + token (V·H) and position (77·H) embeddings + final norm 2H, H = 1024, F = 4096.
  const int64_t H = 1024, F = 4096;
  const int64_t sd2_text =
      23 * (4 * (H * H + H) + 4 * H + (H * F + F) + (F * H + H)) + 49408 * H + 77 * H + 2 * H;
  std::vector<Case> cases = {
      {"SD1 UNet", unet_parameters(UNetConfig::sd1()), 686, 859'520'964},
      {"SD2 UNet (768-v)", unet_parameters(UNetConfig::sd2(true)), 686, 865'910'724},
      {"SD2 UNet (base)", unet_parameters(UNetConfig::sd2(false)), 686, 865'910'724},
      {"VAE", vae_parameters(VaeConfig::sd()), 248, 83'653'863},
      {"SD1 text encoder", clip_text_parameters(ClipTextConfig::sd1()), 196, 123'060'480},
      {"SD2 text encoder", clip_text_parameters(ClipTextConfig::sd2()), 23 * 16 + 4, sd2_text},
      // stable-diffusion-xl-base-1.0: the UNet's published count, and text_encoder_2
      // (CLIPTextModelWithProjection, 817'720'320 for both towers − SD1's 123'060'480).
      {"SDXL UNet", unet_parameters(UNetConfig::sdxl()), 1680, 2'567'463'684},
      {"SDXL text encoder 2", clip_text_projection_parameters(ClipTextConfig::sdxl_bigg()), 32 * 16 + 5, 694'659'840},
  };
  for (const auto& c : cases) {
    std::printf("[checksum] %-18s %4zu tensors %13lld parameters\n", c.label, c.specs.size(),
                static_cast<long long>(parameter_count(c.specs)));
    EXPECT_EQ(c.specs.size(), c.tensors) << c.label;
    EXPECT_EQ(parameter_count(c.specs), c.params) << c.label;
  }
  const auto decoder_only = vae_parameters(VaeConfig::sd(), /*with_encoder=*/false);
  std::printf("[checksum] %-18s %4zu tensors %13lld parameters\n", "VAE decoder only", decoder_only.size(),
              static_cast<long long>(parameter_count(decoder_only)));
}

TEST(ParameterCatalog, SyntheticValuesAreDeterministicAndScaled) {
  ParameterSpec w{"down_blocks.0.resnets.0.conv1.weight", {320, 320, 3, 3}, ParameterKind::Weight};
  const int64_t n = shape_numel(w.shape);
  std::vector<float> a(n), b(n), c(n);
  {
    DeviceScope one({0, 1, nullptr});
    synthetic_parameter_values(w, 7, a.data());
  }
  {
    DeviceScope two({0, 2, nullptr});
    synthetic_parameter_values(w, 7, b.data());
  }
  synthetic_parameter_values(w, 8, c.data());
  EXPECT_EQ(a, b) << "values must not depend on the thread count";
  EXPECT_NE(a, c) << "the seed must matter";
  double sum = 0, sq = 0, peak = 0;
  for (float v : a) {
    sum += v;
    sq += double{v} * v;
    peak = std::max(peak, std::fabs(double{v}));
  }
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean), want = 1.0 / std::sqrt(320.0 * 9);
  std::printf("[synthetic] mean %.2e std %.5f (want %.5f) peak %.1f sigma\n", mean, stddev, want,
              peak / want);
  EXPECT_NEAR(stddev / want, 1.0, 0.01);
  EXPECT_LT(std::fabs(mean), 0.01 * want);
  EXPECT_LE(peak / want, 3.47);

  std::vector<float> scale(8);
  synthetic_parameter_values({"x.norm1.weight", {8}, ParameterKind::NormScale}, 1, scale.data());
  EXPECT_EQ(scale, std::vector<float>(8, 1.0f));
}

// A model written from each catalog loads with the real loaders, which take every catalogued
// tensor (a missing one throws) and then call finish() (a left-over one throws).
TEST(ParameterCatalog, LoadersTakeExactlyTheCatalog) {
  const fs::path dir = test::temp_dir("catalog_loaders");
  auto load = [&](const std::string& file, const std::vector<ParameterSpec>& specs) {
    write_diffusers(dir / file, synthetic(specs, 1));
    return weights_from_safetensors({dir / file}, file);
  };
  for (bool sd2 : {false, true}) {
    const UNetConfig uc = sd_shaped_unet(sd2);
    EXPECT_NO_THROW(UNet2DCondition::load(*load("unet.safetensors", unet_parameters(uc)), uc))
        << "sd2 " << sd2;
    const ClipTextConfig tc = small_text(sd2);
    EXPECT_NO_THROW(ClipTextModel::load(*load("text.safetensors", clip_text_parameters(tc)), tc))
        << "sd2 " << sd2;
  }
  const VaeConfig vc = sd_shaped_vae();
  EXPECT_NO_THROW(AutoencoderKL::load(*load("vae.safetensors", vae_parameters(vc)), vc));
  EXPECT_NO_THROW(AutoencoderKL::load(*load("vae_dec.safetensors", vae_parameters(vc, false)), vc, false));
  UNetConfig inpaint = sd_shaped_unet(false);
  inpaint.in_channels = 9;
  EXPECT_NO_THROW(UNet2DCondition::load(*load("unet9.safetensors", unet_parameters(inpaint)), inpaint));
  // The check can fail: one tensor fewer is refused.
  auto specs = unet_parameters(sd_shaped_unet(false));
  specs.pop_back();
  EXPECT_THROW(UNet2DCondition::load(*load("short.safetensors", specs), sd_shaped_unet(false)), Error);
}

// SD-structured models through both layouts: same outputs bit for bit.
TEST(ParameterCatalog, SingleFileLayoutGivesIdenticalModels) {
  const fs::path dir = test::temp_dir("catalog_single_file");
  for (bool sd2 : {false, true}) {
    for (int in_channels : {4, 9}) {
      SCOPED_TRACE(std::string(sd2 ? "SD2" : "SD1") + " in_channels " + std::to_string(in_channels));
      UNetConfig uc = sd_shaped_unet(sd2);
      uc.in_channels = in_channels;
      const VaeConfig vc = sd_shaped_vae();
      const ClipTextConfig tc = small_text(sd2);
      SingleFileContents contents;
      contents.family = sd2 ? SingleFileCheckpoint::Family::SD2 : SingleFileCheckpoint::Family::SD1;
      contents.unet = synthetic(unet_parameters(uc), 3);
      contents.vae = synthetic(vae_parameters(vc), 4);
      contents.text_encoder = synthetic(clip_text_parameters(tc), 5);
      contents.fill_unused = [](const std::string& name, const Shape& shape, float* dst) {
        synthetic_values(name, shape, 6, dst);
      };
      write_single_file(dir / "model.safetensors", contents, DType::F32);
      write_diffusers(dir / "unet.safetensors", contents.unet);
      write_diffusers(dir / "vae.safetensors", contents.vae);
      write_diffusers(dir / "text.safetensors", contents.text_encoder);

      auto file = SafetensorsFile::open(dir / "model.safetensors");
      // SD's numbering: 12 input blocks, downsamplers at 3, 6, 9; upsamplers at 2.1, 5.2, 8.2.
      const std::string m = "model.diffusion_model.";
      for (const char* k :
           {"input_blocks.11.0.in_layers.0.weight", "input_blocks.9.0.op.weight",
            "input_blocks.7.1.proj_in.weight", "output_blocks.2.1.conv.weight",
            "output_blocks.5.2.conv.weight", "output_blocks.8.2.conv.weight",
            "output_blocks.11.1.proj_out.weight", "output_blocks.11.0.skip_connection.weight"})
        EXPECT_NE(file->find(m + k), nullptr) << k;
      EXPECT_EQ(file->find(m + "output_blocks.11.2.conv.weight"), nullptr);
      EXPECT_NE(file->find("first_stage_model.decoder.up.3.upsample.conv.weight"), nullptr);
      EXPECT_EQ(file->find("first_stage_model.decoder.up.0.upsample.conv.weight"), nullptr);

      SingleFileCheckpoint ck = open_single_file(dir / "model.safetensors");
      EXPECT_EQ(ck.family, contents.family);
      EXPECT_EQ(ck.unet_in_channels, in_channels);
      EXPECT_EQ(ck.cross_attention_dim, 48);
      EXPECT_EQ(ck.v_prediction, sd2);

      const Numerics num{Flavour::Diffusers};
      UNet2DCondition u_single = UNet2DCondition::load(*ck.unet, uc);
      UNet2DCondition u_folder =
          UNet2DCondition::load(*weights_from_safetensors({dir / "unet.safetensors"}, "unet"), uc);
      Tensor x = random_tensor({1, in_channels, 16, 16}, 11), ctx = random_tensor({1, 7, 48}, 12);
      expect_identical(u_single.forward(x, {500.0}, ctx, num), u_folder.forward(x, {500.0}, ctx, num),
                       "unet");

      AutoencoderKL v_single = AutoencoderKL::load(*ck.vae, vc);
      AutoencoderKL v_folder =
          AutoencoderKL::load(*weights_from_safetensors({dir / "vae.safetensors"}, "vae"), vc);
      Tensor z = random_tensor({1, 4, 4, 4}, 13), img = random_tensor({1, 3, 16, 16}, 14);
      expect_identical(v_single.decode(z), v_folder.decode(z), "vae decode");
      expect_identical(v_single.encode_moments(img), v_folder.encode_moments(img), "vae encode");

      ClipTextModel t_single = ClipTextModel::load(*ck.text_encoder, tc);
      ClipTextModel t_folder =
          ClipTextModel::load(*weights_from_safetensors({dir / "text.safetensors"}, "text"), tc);
      std::vector<int32_t> ids(2 * 77);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % 1000);
      expect_identical(t_single.forward(ids, 2, 77).last_hidden_state,
                       t_folder.forward(ids, 2, 77).last_hidden_state, "text encoder");
    }
  }
}
