// load_autoencoder_tiny on the layouts TAESD ships in — diffusers folder, madebyollin's
// <name>_decoder/_encoder.safetensors (as a file or a folder) — all giving diffusers' numbers on
// tests/data/tiny-taesd, and every way those files can be wrong, each an error naming the file
// (and the tensor).
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "kernels/isa.h"
#include "kernels/tuning.h"
#include "models/layers.h"
#include "pipeline/autoencoder_tiny_loader.h"
#include "pipeline/model.h"
#include "scoped_vdpbf16ps.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path tiny_dir() { return test::data_dir() / "tiny-taesd"; }
fs::path single_dir() { return tiny_dir() / "single-file"; }

// The pipeline image of latents b and the encoder latents of image b against diffusers.
void expect_goldens(const AutoencoderTiny& taesd, const std::string& label, bool with_encoder = true) {
  auto g = SafetensorsFile::open(tiny_dir() / "goldens" / "taesd.safetensors");
  test::expect_parity(label + " decode image b", taesd.decode_nhwc(to_nhwc(g->to_f32("decode_latents_b"))),
                      g->to_f32("decode_image_b"));
  ASSERT_EQ(taesd.has_encoder(), with_encoder);
  if (with_encoder)
    test::expect_parity(label + " encode latents b", to_nchw(taesd.encode_nhwc(to_nhwc(g->to_f32("encode_image_b")))),
                        g->to_f32("encode_latents_b"));
}

std::string load_error(const fs::path& path) {
  try {
    load_autoencoder_tiny(path, ComputeDType::F32);
  } catch (const Error& e) {
    std::printf("[load error] %s\n", e.what());
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Writes `src`'s tensors, changed by `edit`, to `out`.
void rewrite(const fs::path& src, const fs::path& out,
             const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    auto f = SafetensorsFile::open(src);
    for (const auto& t : f->tensors()) tensors.emplace_back(t.name, f->to_f32(t));
  }
  edit(tensors);
  write_safetensors_f32(out, tensors);
}

void drop(std::vector<std::pair<std::string, Tensor>>& t, const std::string& name) {
  t.erase(std::remove_if(t.begin(), t.end(), [&](auto& p) { return p.first == name; }), t.end());
}

fs::path diffusers_copy(const std::string& name) {
  const fs::path dir = test::temp_dir(name);
  fs::copy_file(tiny_dir() / "config.json", dir / "config.json");
  return dir;
}

}  // namespace

TEST(TaesdLoader, DiffusersFolderF32AndBf16) {
  expect_goldens(*load_autoencoder_tiny(tiny_dir(), ComputeDType::F32), "folder f32");
  auto bf16 = load_autoencoder_tiny(tiny_dir(), ComputeDType::BF16);
  EXPECT_EQ(bf16->precision(), kernels::Precision::BF16);
  auto g = SafetensorsFile::open(tiny_dir() / "goldens" / "taesd.safetensors");
  test::expect_parity("folder bf16 decode image a", bf16->decode_nhwc(to_nhwc(g->to_f32("decode_latents_a"))),
                      g->to_f32("decode_image_a"), 1e-2);
}

TEST(TinyAutoencoderPrecision, Bf16OnlyWhereTheCpuMultipliesBf16Faster) {
  EXPECT_EQ(tiny_autoencoder_dtype(ComputeDType::F32, false), ComputeDType::F32);
  EXPECT_EQ(tiny_autoencoder_dtype(ComputeDType::F32, true), ComputeDType::F32);
  EXPECT_EQ(tiny_autoencoder_dtype(ComputeDType::BF16, true), ComputeDType::BF16);
  EXPECT_EQ(tiny_autoencoder_dtype(ComputeDType::BF16, false), ComputeDType::F32);
}

namespace {

std::shared_ptr<const StableDiffusionModel> bf16_model_with_taesd() {
  ModelLoadOptions o;
  o.dtype = ComputeDType::BF16;
  o.tiny_autoencoder = tiny_dir();
  return StableDiffusionModel::load(test::tiny_sd_dir(), o);
}

bool notes_float32_taesd(const StableDiffusionModel& m) {
  for (const std::string& note : m.load_notes())
    if (contains(note, "tiny autoencoder computes in f32")) return true;
  return false;
}

}  // namespace

// bf16 products by FMA on widened values (forced here: VDPBF16PS off, as on AVX2 CPUs and Intel
// Sapphire/Emerald Rapids): a bf16 model's TAESD is the float32 one, to the bit, and the load says so.
TEST(TinyAutoencoderPrecision, ABf16ModelDecodesInFloat32WhereBf16ProductsAreFmas) {
  const kernels::ScopedKernelIsa fma_only(best_isa(), /*bf16_dot=*/false);
  ASSERT_FALSE(kernels::kernel_bf16_dot());
  const auto model = bf16_model_with_taesd();
  ASSERT_TRUE(model->tiny_autoencoder());
  EXPECT_EQ(model->tiny_autoencoder()->precision(), kernels::Precision::F32);
  EXPECT_TRUE(notes_float32_taesd(*model));
  auto g = SafetensorsFile::open(tiny_dir() / "goldens" / "taesd.safetensors");
  const Tensor latents = to_nhwc(g->to_f32("decode_latents_a"));
  const test::Diff d = test::diff(model->tiny_autoencoder()->decode_nhwc(latents),
                                  load_autoencoder_tiny(tiny_dir(), ComputeDType::F32)->decode_nhwc(latents));
  std::printf("[taesd] bf16 model's TAESD vs the f32 TAESD: max_abs_diff=%.3e\n", d.max_abs);
  EXPECT_EQ(d.max_abs, 0.0);
}

// Where VDPBF16PS is what bf16 products use, a bf16 model keeps its TAESD in bf16.
TEST(TinyAutoencoderPrecision, ABf16ModelKeepsBf16WhereBf16ProductsAreNative) {
  if (!has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 instructions";
  const test::ScopedVdpbf16ps dot;
  ASSERT_TRUE(kernels::kernel_bf16_dot());
  const auto model = bf16_model_with_taesd();
  ASSERT_TRUE(model->tiny_autoencoder());
  EXPECT_EQ(model->tiny_autoencoder()->precision(), kernels::Precision::BF16);
  EXPECT_FALSE(notes_float32_taesd(*model));
}

TEST(TaesdLoader, MadebyollinFilesGiveTheSameModel) {
  for (const fs::path& path : {single_dir(), single_dir() / "taesd_decoder.safetensors",
                               single_dir() / "taesd_encoder.safetensors"}) {
    auto taesd = load_autoencoder_tiny(path, ComputeDType::F32);
    // The config read from the tensors is the folder's config.json.
    const AutoencoderTinyConfig want =
        AutoencoderTinyConfig::from_json(read_text_file(tiny_dir() / "config.json"), "config.json");
    EXPECT_EQ(taesd->config().decoder_block_out_channels, want.decoder_block_out_channels);
    EXPECT_EQ(taesd->config().encoder_block_out_channels, want.encoder_block_out_channels);
    EXPECT_EQ(taesd->config().num_decoder_blocks, want.num_decoder_blocks);
    EXPECT_EQ(taesd->config().num_encoder_blocks, want.num_encoder_blocks);
    EXPECT_EQ(taesd->config().latent_channels, want.latent_channels);
    expect_goldens(*taesd, "madebyollin " + path.filename().string());
  }
}

TEST(TaesdLoader, DecoderFileAloneLoadsWithoutEncoder) {
  const fs::path dir = test::temp_dir("taesd_decoder_only");
  fs::copy_file(single_dir() / "taesd_decoder.safetensors", dir / "taesdxl_decoder.safetensors");
  auto taesd = load_autoencoder_tiny(dir, ComputeDType::F32);
  expect_goldens(*taesd, "decoder only", /*with_encoder=*/false);
  EXPECT_THROW(taesd->encode_nhwc(Tensor::zeros({1, 16, 16, 3})), Error);
}

TEST(TaesdLoader, WrongPathsAreExplained) {
  const fs::path dir = test::temp_dir("taesd_paths");
  EXPECT_TRUE(contains(load_error(dir / "nothing"), "does not exist"));
  EXPECT_TRUE(contains(load_error(dir), "neither config.json"));
  // An encoder without its decoder.
  fs::create_directories(dir / "enc");
  fs::copy_file(single_dir() / "taesd_encoder.safetensors", dir / "enc" / "taesd_encoder.safetensors");
  EXPECT_TRUE(contains(load_error(dir / "enc" / "taesd_encoder.safetensors"), "taesd_decoder.safetensors"));
  // Two decoders in one folder.
  fs::create_directories(dir / "two");
  fs::copy_file(single_dir() / "taesd_decoder.safetensors", dir / "two" / "taesd_decoder.safetensors");
  fs::copy_file(single_dir() / "taesd_decoder.safetensors", dir / "two" / "taesdxl_decoder.safetensors");
  EXPECT_TRUE(contains(load_error(dir / "two"), "several"));
  // Pickles and unknown names.
  std::ofstream(dir / "taesd_decoder.pth") << "not loaded";
  EXPECT_TRUE(contains(load_error(dir / "taesd_decoder.pth"), ".safetensors only"));
  std::ofstream(dir / "vae.safetensors") << "x";
  EXPECT_TRUE(contains(load_error(dir / "vae.safetensors"), "not a tiny autoencoder"));
  // An AutoencoderKL folder.
  fs::create_directories(dir / "kl");
  fs::copy_file(test::tiny_sd_dir() / "vae" / "config.json", dir / "kl" / "config.json");
  EXPECT_TRUE(contains(load_error(dir / "kl"), "not an AutoencoderTiny"));
}

TEST(TaesdLoader, TruncatedFilesNameTheFile) {
  const fs::path dir = test::temp_dir("taesd_truncated");
  for (const char* name : {"taesd_decoder.safetensors", "taesd_encoder.safetensors"}) {
    for (const char* other : {"taesd_decoder.safetensors", "taesd_encoder.safetensors"})
      fs::copy_file(single_dir() / other, dir / other, fs::copy_options::overwrite_existing);
    fs::resize_file(dir / name, fs::file_size(dir / name) - 100);
    EXPECT_TRUE(contains(load_error(dir), name)) << name;
  }
  const fs::path folder = diffusers_copy("taesd_truncated_folder");
  fs::copy_file(tiny_dir() / "diffusion_pytorch_model.safetensors", folder / "diffusion_pytorch_model.safetensors");
  fs::resize_file(folder / "diffusion_pytorch_model.safetensors", 1000);
  EXPECT_TRUE(contains(load_error(folder), "diffusion_pytorch_model.safetensors"));
}

TEST(TaesdLoader, MissingUnknownAndMisshapedTensorsAreNamed) {
  const fs::path weights = tiny_dir() / "diffusion_pytorch_model.safetensors";
  struct Case {
    const char* name;
    std::function<void(std::vector<std::pair<std::string, Tensor>>&)> edit;
    const char* tensor;
  };
  const std::vector<Case> cases = {
      {"missing", [](auto& t) { drop(t, "decoder.layers.4.conv.2.bias"); }, "decoder.layers.4.conv.2.bias"},
      {"unknown", [](auto& t) { t.emplace_back("decoder.layers.6.bias", Tensor::zeros({16})); },
       "decoder.layers.6.bias"},  // the upsampling conv has no bias
      {"misshaped",
       [](auto& t) {
         drop(t, "encoder.layers.0.weight");
         t.emplace_back("encoder.layers.0.weight", Tensor::zeros({16, 4, 3, 3}));
       },
       "encoder.layers.0.weight"},
  };
  for (const Case& c : cases) {
    const fs::path dir = diffusers_copy(std::string("taesd_bad_") + c.name);
    rewrite(weights, dir / "diffusion_pytorch_model.safetensors", c.edit);
    const std::string e = load_error(dir);
    EXPECT_TRUE(contains(e, c.tensor)) << c.name;
    EXPECT_TRUE(contains(e, "diffusion_pytorch_model.safetensors")) << c.name;
  }
}

TEST(TaesdLoader, BadMadebyollinFilesAreNamed) {
  struct Case {
    const char* name;
    const char* file;
    std::function<void(std::vector<std::pair<std::string, Tensor>>&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      // A tensor at the decoder's parameter-free ReLU (index 2).
      {"relu_weight", "taesd_decoder.safetensors", [](auto& t) { t.emplace_back("2.weight", Tensor::zeros({16})); },
       "'2.weight'"},
      {"not_indexed", "taesd_encoder.safetensors", [](auto& t) { t.emplace_back("vae_scale", Tensor::zeros({1})); },
       "'vae_scale'"},
      {"missing_bias", "taesd_decoder.safetensors", [](auto& t) { drop(t, "4.conv.4.bias"); },
       "decoder.layers.3.conv.4.bias"},
      {"misshaped", "taesd_encoder.safetensors",
       [](auto& t) {
         drop(t, "2.weight");
         t.emplace_back("2.weight", Tensor::zeros({16, 16, 1, 1}));
       },
       "encoder.layers.2.weight"},
      {"hole", "taesd_decoder.safetensors",
       [](auto& t) {
         for (const char* k : {"4.conv.0.weight", "4.conv.0.bias", "4.conv.2.weight", "4.conv.2.bias",
                               "4.conv.4.weight", "4.conv.4.bias"})
           drop(t, k);
       },
       "cannot read layer 4"},
      {"latent_mismatch", "taesd_encoder.safetensors",
       [](auto& t) {
         drop(t, "14.weight");
         drop(t, "14.bias");
         t.emplace_back("14.weight", Tensor::zeros({16, 16, 3, 3}));
         t.emplace_back("14.bias", Tensor::zeros({16}));
       },
       "16 latent channels"},
  };
  for (const Case& c : cases) {
    const fs::path dir = test::temp_dir(std::string("taesd_single_") + c.name);
    for (const char* f : {"taesd_decoder.safetensors", "taesd_encoder.safetensors"}) {
      if (std::string(f) == c.file)
        rewrite(single_dir() / f, dir / f, c.edit);
      else
        fs::copy_file(single_dir() / f, dir / f);
    }
    const std::string e = load_error(dir / "taesd_decoder.safetensors");
    EXPECT_TRUE(contains(e, c.expect)) << c.name;
    EXPECT_TRUE(contains(e, c.file)) << c.name;
  }
}
