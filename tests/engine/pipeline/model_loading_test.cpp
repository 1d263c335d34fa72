// Loading models from the files users have: diffusers folders with fp16 variants and sharded
// weights, and every way a folder can be wrong, each with an error naming the tensor and file.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <fstream>

#include "core/error.h"
#include "core/half.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path copy_tiny(const std::string& name) {
  fs::path dir = test::temp_dir(name) / "model";
  fs::copy(test::tiny_sd_dir(), dir, fs::copy_options::recursive);
  fs::remove_all(dir / "goldens");
  return dir;
}

// Rewrites a component's weights file through `edit` (which may add, drop or change tensors).
void rewrite(const fs::path& file, const fs::path& out,
             const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  auto f = SafetensorsFile::open(file);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& t : f->tensors()) tensors.emplace_back(t.name, f->to_f32(t));
  f.reset();
  edit(tensors);
  fs::remove(file);
  write_safetensors_f32(out, tensors);
}

std::string load_error(const fs::path& dir) {
  try {
    StableDiffusionModel::load(dir);
  } catch (const Error& e) {
    std::printf("[load error] %s\n", e.what());
    return e.what();
  }
  return "";
}

GenerationResult generate(const fs::path& dir) {
  ShardedPipeline pipe(StableDiffusionModel::load(dir));
  GenerationRequest r;
  r.prompts = {"a red circle"};
  r.steps = 2;
  r.seed = 5;
  return pipe.run(r);
}

}  // namespace

TEST(ModelLoading, Fp16VariantFilesLoadAndMatchFp32Closely) {
  fs::path dir = copy_tiny("load_fp16");
  for (const char* comp : {"unet", "vae"}) {
    fs::path f = dir / comp / "diffusion_pytorch_model.safetensors";
    auto src = SafetensorsFile::open(f);
    std::deque<Tensor> keep;  // stable addresses for the fill callbacks
    std::vector<TensorToWrite> list;
    for (const auto& t : src->tensors()) {
      keep.push_back(src->to_f32(t));
      const Tensor* k = &keep.back();
      list.push_back({t.name, DType::F16, t.shape, [k](uint8_t* dst, size_t) {
                        for (int64_t i = 0; i < k->numel(); ++i) {
                          uint16_t h = f32_to_f16((*k)[i]);
                          std::memcpy(dst + 2 * i, &h, 2);
                        }
                      }});
    }
    src.reset();
    write_safetensors(dir / comp / "diffusion_pytorch_model.fp16.safetensors", list);
    fs::remove(f);  // only the variant remains, as in fp16-only downloads
  }
  GenerationResult half = generate(dir);
  GenerationResult full = generate(test::tiny_sd_dir());
  test::Diff d = test::diff(half.images, full.images);
  std::printf("[fp16 variant] images max_abs_diff vs fp32 weights %.3e\n", d.max_abs);
  EXPECT_GT(d.max_abs, 0.0);
  EXPECT_LT(d.max_abs, 0.05);
}

TEST(ModelLoading, ShardedWeightsLoadIdentically) {
  fs::path dir = copy_tiny("load_sharded");
  fs::path f = dir / "unet" / "diffusion_pytorch_model.safetensors";
  auto src = SafetensorsFile::open(f);
  std::vector<std::pair<std::string, Tensor>> a, b;
  size_t i = 0;
  for (const auto& t : src->tensors()) (i++ % 2 ? a : b).emplace_back(t.name, src->to_f32(t));
  src.reset();
  fs::remove(f);
  write_safetensors_f32(dir / "unet" / "diffusion_pytorch_model-00001-of-00002.safetensors", a);
  write_safetensors_f32(dir / "unet" / "diffusion_pytorch_model-00002-of-00002.safetensors", b);
  GenerationResult sharded = generate(dir), whole = generate(test::tiny_sd_dir());
  for (int64_t k = 0; k < whole.images.numel(); ++k) ASSERT_EQ(sharded.images[k], whole.images[k]);
}

TEST(ModelLoading, MissingUnexpectedAndMisshapedTensorsAreNamed) {
  {
    fs::path dir = copy_tiny("load_missing");
    fs::path f = dir / "unet" / "diffusion_pytorch_model.safetensors";
    rewrite(f, f, [](auto& t) {
      t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "conv_out.bias"; }), t.end());
    });
    std::string e = load_error(dir);
    EXPECT_NE(e.find("conv_out.bias"), std::string::npos);
    EXPECT_NE(e.find("unet/diffusion_pytorch_model.safetensors"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_unexpected");
    fs::path f = dir / "vae" / "diffusion_pytorch_model.safetensors";
    rewrite(f, f, [](auto& t) { t.emplace_back("decoder.extra_layer.weight", Tensor::zeros({3})); });
    std::string e = load_error(dir);
    EXPECT_NE(e.find("decoder.extra_layer.weight"), std::string::npos);
    EXPECT_NE(e.find("vae/diffusion_pytorch_model.safetensors"), std::string::npos);
    EXPECT_NE(e.find("unexpected"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_shape");
    fs::path f = dir / "text_encoder" / "model.safetensors";
    rewrite(f, f, [](auto& t) {
      for (auto& [name, tensor] : t)
        if (name == "text_model.final_layer_norm.weight") tensor = Tensor::zeros({31});
    });
    std::string e = load_error(dir);
    EXPECT_NE(e.find("text_model.final_layer_norm.weight"), std::string::npos);
    EXPECT_NE(e.find("text_encoder/model.safetensors"), std::string::npos);
    EXPECT_NE(e.find("(31)"), std::string::npos);
  }
}

TEST(ModelLoading, BrokenFoldersGetClearErrors) {
  {
    fs::path dir = copy_tiny("load_bin_only");
    fs::rename(dir / "unet" / "diffusion_pytorch_model.safetensors", dir / "unet" / "diffusion_pytorch_model.bin");
    EXPECT_NE(load_error(dir).find(".safetensors only"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_no_vae");
    fs::remove_all(dir / "vae");
    EXPECT_NE(load_error(dir).find("'vae'"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_bad_config");
    std::ofstream(dir / "unet" / "config.json") << "{ not json";
    EXPECT_NE(load_error(dir).find("not valid JSON"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_sdxl_config");
    std::string cfg = read_text_file(dir / "unet" / "config.json");
    cfg.replace(cfg.find("\"addition_embed_type\": null"), 27, "\"addition_embed_type\": \"text_time\"");
    std::ofstream(dir / "unet" / "config.json") << cfg;
    EXPECT_NE(load_error(dir).find("addition_embed_type"), std::string::npos);
  }
  {
    fs::path dir = copy_tiny("load_truncated");
    fs::path f = dir / "vae" / "diffusion_pytorch_model.safetensors";
    fs::resize_file(f, fs::file_size(f) / 2);
    std::string e = load_error(dir);
    EXPECT_NE(e.find("truncated"), std::string::npos);
    EXPECT_NE(e.find("diffusion_pytorch_model.safetensors"), std::string::npos);
  }
  EXPECT_NE(load_error(test::temp_dir("load_empty")).find("not a diffusers model folder"), std::string::npos);
}
