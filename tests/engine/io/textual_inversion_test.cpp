// Textual-inversion files: the three layouts (files made by tools/goldens/make_prompt_goldens.py
// and here), and every refusal with a message naming the file.
#include "io/textual_inversion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path prompts_dir() { return test::data_dir() / "tiny-sd-prompts" / "embeddings"; }

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::zeros(std::move(shape));
  for (float& v : t) v = value;
  return t;
}

// The error message of reading `path`, or "" when it reads.
std::string error_reading(const fs::path& path) {
  try {
    read_textual_inversion(path);
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    return e.what();
  }
  return "";
}

void expect_refused(const fs::path& path, const std::string& words) {
  const std::string msg = error_reading(path);
  EXPECT_NE(msg.find(path.filename().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(words), std::string::npos) << msg;
}

}  // namespace

TEST(TextualInversion, ReadsA1111AndDiffusersLayouts) {
  const TextualInversion a = read_textual_inversion(prompts_dir() / "tiny-style.safetensors");
  EXPECT_EQ(a.name, "tiny-style");
  EXPECT_EQ(a.layout, "emb_params");
  EXPECT_EQ(a.vectors.shape(), (Shape{2, 32}));
  const TextualInversion b = read_textual_inversion(prompts_dir() / "old-style.safetensors");
  EXPECT_EQ(b.layout, "string_to_param");
  EXPECT_EQ(b.vectors.shape(), (Shape{1, 32}));
  const TextualInversion c = read_textual_inversion(prompts_dir() / "cat-toy.safetensors");
  EXPECT_EQ(c.name, "cat-toy");
  EXPECT_EQ(c.layout, "diffusers");
  EXPECT_EQ(c.vectors.shape(), (Shape{1, 32}));  // (width,) becomes one vector
  const auto file = SafetensorsFile::open(prompts_dir() / "cat-toy.safetensors");
  const Tensor raw = file->to_f32("<cat-toy>");
  for (int64_t i = 0; i < 32; ++i) ASSERT_EQ(c.vectors.data()[i], raw.data()[i]);
}

TEST(TextualInversion, RefusesOddTensors) {
  const fs::path dir = test::temp_dir("ti_refused");
  write_safetensors_f32(dir / "two.safetensors", {{"a", filled({1, 32}, 0.1f)}, {"b", filled({1, 32}, 0.1f)}});
  expect_refused(dir / "two.safetensors", "not a textual-inversion embedding");
  write_safetensors_f32(dir / "rank3.safetensors", {{"emb_params", filled({1, 2, 32}, 0.1f)}});
  expect_refused(dir / "rank3.safetensors", "shape");
  write_safetensors_f32(dir / "many.safetensors", {{"emb_params", filled({76, 32}, 0.1f)}});
  expect_refused(dir / "many.safetensors", "76 vectors");
  write_safetensors_f32(dir / "nan.safetensors", {{"emb_params", filled({1, 32}, std::nanf(""))}});
  expect_refused(dir / "nan.safetensors", "NaN");
  const int64_t id = 7;
  write_safetensors(dir / "int.safetensors", {{"emb_params", DType::I64, {1}, [&](uint8_t* dst, size_t n) {
                                                 std::memcpy(dst, &id, n);
                                               }}});
  expect_refused(dir / "int.safetensors", "dtype");
}

TEST(TextualInversion, RefusesTruncatedAndHostileFiles) {
  const fs::path dir = test::temp_dir("ti_hostile");
  std::ifstream in(prompts_dir() / "tiny-style.safetensors", std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(whole.size(), 100u);
  const std::string cut = whole.substr(0, whole.size() - 10);
  write_file_atomic(dir / "truncated.safetensors", cut.data(), cut.size());
  EXPECT_NE(error_reading(dir / "truncated.safetensors").find("truncated.safetensors"), std::string::npos);
  std::string huge_header = whole;
  const uint64_t n = 1ull << 40;  // header length far beyond the file
  std::memcpy(huge_header.data(), &n, 8);
  write_file_atomic(dir / "hostile.safetensors", huge_header.data(), huge_header.size());
  EXPECT_NE(error_reading(dir / "hostile.safetensors").find("hostile.safetensors"), std::string::npos);
}

TEST(TextualInversion, ReadsTheSdxlLayout) {
  // (Whether it fits the model is checked where it is used: pipeline/sdxl_prompt_test.cpp.)
  const fs::path dir = test::temp_dir("ti_sdxl");
  write_safetensors_f32(dir / "sdxl.safetensors", {{"clip_g", filled({2, 1280}, 0.25f)}, {"clip_l", filled({2, 768}, 0.5f)}});
  const TextualInversion ti = read_textual_inversion(dir / "sdxl.safetensors");
  EXPECT_TRUE(ti.is_sdxl());
  EXPECT_EQ(ti.layout, "sdxl");
  EXPECT_EQ(ti.vectors.shape(), (Shape{2, 768}));    // clip_l: the first tower's
  EXPECT_EQ(ti.vectors_g.shape(), (Shape{2, 1280}));  // clip_g: the second tower's
  EXPECT_EQ(ti.vectors.data()[0], 0.5f);
  EXPECT_EQ(ti.vectors_g.data()[0], 0.25f);
  const TextualInversion tiny = read_textual_inversion(test::data_dir() / "tiny-sdxl-prompts" / "embeddings" / "xl-mark.safetensors");
  EXPECT_EQ(tiny.vectors.shape(), (Shape{1, 32}));
  EXPECT_EQ(tiny.vectors_g.shape(), (Shape{1, 48}));
  EXPECT_FALSE(read_textual_inversion(prompts_dir() / "tiny-style.safetensors").is_sdxl());
}

TEST(TextualInversion, RefusesBrokenAndHostileSdxlFiles) {
  const fs::path dir = test::temp_dir("ti_sdxl_refused");
  write_safetensors_f32(dir / "only-g.safetensors", {{"clip_g", filled({1, 1280}, 0.1f)}});
  expect_refused(dir / "only-g.safetensors", "needs both tensors clip_l and clip_g");
  write_safetensors_f32(dir / "extra.safetensors", {{"clip_g", filled({1, 48}, 0.1f)}, {"clip_l", filled({1, 32}, 0.1f)},
                                                    {"emb_params", filled({1, 32}, 0.1f)}});
  expect_refused(dir / "extra.safetensors", "unknown tensor 'emb_params'");
  write_safetensors_f32(dir / "counts.safetensors", {{"clip_g", filled({1, 48}, 0.1f)}, {"clip_l", filled({2, 32}, 0.1f)}});
  expect_refused(dir / "counts.safetensors", "'clip_l' has 2 vectors and tensor 'clip_g' 1");
  write_safetensors_f32(dir / "nan-g.safetensors", {{"clip_g", filled({1, 48}, std::nanf(""))}, {"clip_l", filled({1, 32}, 0.1f)}});
  expect_refused(dir / "nan-g.safetensors", "tensor 'clip_g' holds a NaN");
  write_safetensors_f32(dir / "rank3.safetensors", {{"clip_g", filled({1, 1, 48}, 0.1f)}, {"clip_l", filled({1, 32}, 0.1f)}});
  expect_refused(dir / "rank3.safetensors", "tensor 'clip_g' has shape");
  write_safetensors_f32(dir / "many.safetensors", {{"clip_g", filled({76, 48}, 0.1f)}, {"clip_l", filled({76, 32}, 0.1f)}});
  expect_refused(dir / "many.safetensors", "76 vectors");
  const int64_t id = 7;
  write_safetensors(dir / "int.safetensors",
                    {{"clip_g", DType::I64, {1}, [&](uint8_t* dst, size_t n) { std::memcpy(dst, &id, n); }},
                     {"clip_l", DType::F32, {1, 32}, [](uint8_t* dst, size_t n) { std::memset(dst, 0, n); }}});
  expect_refused(dir / "int.safetensors", "dtype");
  // A good SDXL file cut short, and one whose header claims more than the file holds.
  write_safetensors_f32(dir / "good.safetensors", {{"clip_g", filled({2, 48}, 0.1f)}, {"clip_l", filled({2, 32}, 0.1f)}});
  std::ifstream in(dir / "good.safetensors", std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = whole.substr(0, whole.size() - 16);
  write_file_atomic(dir / "truncated-xl.safetensors", cut.data(), cut.size());
  EXPECT_NE(error_reading(dir / "truncated-xl.safetensors").find("truncated-xl.safetensors"), std::string::npos);
  std::string huge_header = whole;
  const uint64_t n = 1ull << 40;
  std::memcpy(huge_header.data(), &n, 8);
  write_file_atomic(dir / "hostile-xl.safetensors", huge_header.data(), huge_header.size());
  EXPECT_NE(error_reading(dir / "hostile-xl.safetensors").find("hostile-xl.safetensors"), std::string::npos);
}

TEST(TextualInversion, FolderKeepsUnreadableFilesWithTheirError) {
  const fs::path dir = test::temp_dir("ti_folder");
  fs::copy_file(prompts_dir() / "cat-toy.safetensors", dir / "cat-toy.safetensors");
  const std::string junk = "junk";
  write_file_atomic(dir / "bad.safetensors", junk.data(), junk.size());
  write_file_atomic(dir / "notes.txt", junk.data(), junk.size());  // not an embedding file: ignored
  const TextualInversionLibrary lib = read_textual_inversion_folder(dir);
  ASSERT_EQ(lib.entries.size(), 2u);
  EXPECT_EQ(lib.entries[0].embedding.name, "bad");
  EXPECT_NE(lib.entries[0].error.find("bad.safetensors"), std::string::npos) << lib.entries[0].error;
  EXPECT_EQ(lib.entries[1].embedding.name, "cat-toy");
  EXPECT_EQ(lib.entries[1].error, "");
  EXPECT_THROW(read_textual_inversion_folder(dir / "missing"), Error);
}
