// Diffusers folders of Flax msgpack weights (tests/data/tiny-sd-flax, written from tiny-sd by
// tools/goldens/make_tiny_sd_flax.py with diffusers' torch → Flax rules): the f32 folder gives
// images bit-identical to the safetensors folder's, the bf16 folder loads in bf16 and runs, a
// folder with both formats prefers safetensors unless asked, and a broken component file is an
// error naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/files.h"
#include "io/flax_msgpack.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path flax_dir(const char* precision) { return test::data_dir() / "tiny-sd-flax" / precision; }

GenerationRequest request(ComputeDType dtype) {
  GenerationRequest r;
  r.prompts = {"a red circle on a blue background", "a small yellow star"};
  r.negative_prompts = {"blurry"};
  r.steps = 4;
  r.seed = 42;
  r.dtype = dtype;
  return r;
}

GenerationResult run(const fs::path& model, ComputeDType dtype = ComputeDType::F32) {
  ModelLoadOptions o;
  o.dtype = dtype;
  ShardedPipeline pipe(StableDiffusionModel::load(model, o));
  return pipe.run(request(dtype));
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * 4) == 0;
}

}  // namespace

TEST(FlaxModel, Float32FolderGivesBitIdenticalImagesToSafetensors) {
  auto flax = StableDiffusionModel::load(flax_dir("f32"));
  EXPECT_EQ(flax->description(), "Flax msgpack (f32)");
  const GenerationResult a = run(flax_dir("f32")), b = run(test::tiny_sd_dir());
  const test::Diff d = test::diff(a.images, b.images);
  std::printf("f32 Flax folder vs safetensors folder: images max abs diff %.3g, latents max abs diff %.3g\n",
              d.max_abs, test::diff(a.final_latents, b.final_latents).max_abs);
  EXPECT_TRUE(bit_identical(a.images, b.images));
  EXPECT_TRUE(bit_identical(a.final_latents, b.final_latents));
}

TEST(FlaxModel, Bfloat16FolderLoadsAsBf16AndRuns) {
  auto model = StableDiffusionModel::load(flax_dir("bf16"), [] {
    ModelLoadOptions o;
    o.dtype = ComputeDType::BF16;
    return o;
  }());
  EXPECT_EQ(model->description(), "Flax msgpack (bf16)");
  const GenerationResult a = run(flax_dir("bf16"), ComputeDType::BF16);
  const GenerationResult ref = run(test::tiny_sd_dir(), ComputeDType::BF16);
  const test::Diff d = test::diff(a.images, ref.images);
  std::printf("bf16 Flax folder (bf16 weights) vs safetensors folder (f32 weights), both computed in bf16: "
              "images max abs diff %.3g\n", d.max_abs);
  ASSERT_EQ(a.images.shape(), (Shape{2, 1, 64, 64, 3}));
  for (float v : a.images) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  // The weights differ by bf16 rounding only (the bf16 compute path rounds them the same way
  // when packing, except the float32 text encoder and biases): images close, not identical.
  EXPECT_LT(d.max_abs, 2e-2);
}

TEST(FlaxModel, FolderWithBothFormatsPrefersSafetensorsUnlessAsked) {
  const fs::path dir = test::temp_dir("flax_both") / "model";
  fs::copy(test::tiny_sd_dir(), dir, fs::copy_options::recursive);
  fs::remove_all(dir / "goldens");
  for (const char* c : {"unet", "vae", "text_encoder"})
    for (const auto& e : fs::directory_iterator(flax_dir("bf16") / c))
      if (e.path().extension() == ".msgpack") fs::copy_file(e.path(), dir / c / e.path().filename());
  EXPECT_EQ(StableDiffusionModel::load(dir)->description(), "diffusers folder");
  ModelLoadOptions o;
  o.prefer_flax = true;
  EXPECT_EQ(StableDiffusionModel::load(dir, o)->description(), "Flax msgpack (bf16)");
}

TEST(FlaxModel, BrokenComponentFilesAreErrorsNamingFileAndTensor) {
  const fs::path dir = test::temp_dir("flax_broken") / "model";
  fs::copy(flax_dir("f32"), dir, fs::copy_options::recursive);
  const fs::path unet = dir / "unet" / "diffusion_flax_model.msgpack";
  // Drop one tensor: the UNet's load names it and the file.
  auto f = open_flax_msgpack(unet);
  std::vector<TensorToWrite> kept;
  std::vector<Tensor> data;
  data.reserve(f->tensors().size());
  for (const auto& t : f->tensors()) {
    if (t.name == "conv_out/bias") continue;
    data.push_back(f->to_f32(t));
    const Tensor* d = &data.back();
    kept.push_back({t.name, DType::F32, t.shape, [d](uint8_t* dst, size_t n) { std::memcpy(dst, d->data(), n); }});
  }
  f.reset();
  write_flax_msgpack(unet, kept);
  auto load_error = [&] {
    try {
      StableDiffusionModel::load(dir);
    } catch (const Error& e) {
      std::printf("[load error] %s\n", e.what());
      return std::string(e.what());
    }
    return std::string();
  };
  std::string msg = load_error();
  EXPECT_NE(msg.find("conv_out.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("diffusion_flax_model.msgpack"), std::string::npos) << msg;
  // An extra tensor: named by its Flax path.
  kept.push_back({"extra_block/kernel", DType::F32, {2, 2}, nullptr});
  kept.push_back({"conv_out/bias", DType::F32, {4}, nullptr});
  write_flax_msgpack(unet, kept);
  msg = load_error();
  EXPECT_NE(msg.find("extra_block/kernel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("diffusion_flax_model.msgpack"), std::string::npos) << msg;
  // A Flax file under another name: the error says which names are read.
  fs::rename(unet, dir / "unet" / "flax_weights.msgpack");
  msg = load_error();
  EXPECT_NE(msg.find("flax_weights.msgpack"), std::string::npos) << msg;
  EXPECT_NE(msg.find("diffusion_flax_model.msgpack"), std::string::npos) << msg;
  fs::rename(dir / "unet" / "flax_weights.msgpack", unet);
  // A truncated file.
  const auto bytes = read_file_bytes(unet);
  write_file_atomic(unet, bytes.data(), bytes.size() / 2);
  msg = load_error();
  EXPECT_NE(msg.find("diffusion_flax_model.msgpack"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}
