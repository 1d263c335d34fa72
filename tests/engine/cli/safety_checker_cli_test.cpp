// octodiff-cli with a model folder holding a safety checker (tiny-sd's components plus
// tests/data/tiny-safety-checker's always-flags checker): the flagged images are reported, kept
// (not blacked out) and marked in their PNG metadata; --no-safety-checker neither loads nor runs it.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "io/flax_msgpack.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path model_with_checker(const fs::path& dir, const fs::path& checker) {
  const fs::path model = dir / "model";
  fs::create_directories(model);
  for (const char* part : {"model_index.json", "scheduler", "text_encoder", "tokenizer", "unet", "vae"})
    fs::copy(test::tiny_sd_dir() / part, model / part, fs::copy_options::recursive);
  for (const char* part : {"safety_checker", "feature_extractor"})
    fs::copy(checker / part, model / part, fs::copy_options::recursive);
  return model;
}

std::vector<std::string> generate(const fs::path& model, std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate", "--model", model.string(), "--steps", "2", "--seed", "3",
                                   "--prompt", "a red circle", "--prompt", "a blue square",
                                   "--out", "grid.png", "--out-dir", "images"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::string parameters_text(const std::vector<PngText>& texts) {
  for (const auto& t : texts)
    if (t.key == "parameters") return t.text;
  return "";
}

}  // namespace

TEST(SafetyCheckerCli, FlaggedImagesAreReportedKeptAndMarkedInMetadata) {
  const fs::path dir = test::temp_dir("safety_cli");
  const fs::path model = model_with_checker(dir, test::data_dir() / "tiny-safety-checker" / "always-flags");
  const test::CliRun r = test::run_cli(generate(model, {"--json"}), dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s", r.err.c_str());
  EXPECT_NE(r.err.find("safety checker: flagged images 1, 2 of 2 (kept, not blacked out"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["nsfw_flagged"], nlohmann::json::array({true, true}));

  std::vector<PngText> texts;
  read_png(dir / "grid.png", &texts);
  auto grid = parse_png_metadata(texts);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid->nsfw_flagged, std::vector<bool>({true, true}));
  EXPECT_NE(parameters_text(texts).find("Safety checker: flagged images 1 2 of 2"), std::string::npos)
      << parameters_text(texts);

  int images = 0;
  for (const auto& e : fs::directory_iterator(dir / "images")) {
    std::vector<PngText> t;
    const Image8 img = read_png(e.path(), &t);
    auto m = parse_png_metadata(t);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->nsfw_flagged, std::vector<bool>({true}));
    EXPECT_NE(parameters_text(t).find("Safety checker: flagged"), std::string::npos);
    bool black = true;
    for (uint8_t v : img.rgb) black = black && v == 0;
    EXPECT_FALSE(black) << e.path() << " was blacked out";
    ++images;
  }
  EXPECT_EQ(images, 2);
}

TEST(SafetyCheckerCli, NoSafetyCheckerNeitherLoadsNorMarks) {
  const fs::path dir = test::temp_dir("safety_cli_off");
  const fs::path model = model_with_checker(dir, test::data_dir() / "tiny-safety-checker" / "always-flags");
  const test::CliRun r = test::run_cli(generate(model, {"--no-safety-checker"}), dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.find("safety checker"), std::string::npos) << r.out;
  std::vector<PngText> texts;
  read_png(dir / "grid.png", &texts);
  auto grid = parse_png_metadata(texts);
  ASSERT_TRUE(grid);
  EXPECT_TRUE(grid->nsfw_flagged.empty());
  EXPECT_EQ(parameters_text(texts).find("Safety checker"), std::string::npos);
}

TEST(SafetyCheckerCli, TheTunedTinyCheckerReportsWhatTheMetadataSays) {
  const fs::path dir = test::temp_dir("safety_cli_tiny");
  const fs::path model = model_with_checker(dir, test::data_dir() / "tiny-safety-checker");
  const test::CliRun r = test::run_cli(generate(model, {}), dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("safety checker: " + (model / "safety_checker" / "model.safetensors").string() +
                       " (safetensors)"), std::string::npos) << r.out;
  std::vector<PngText> texts;
  read_png(dir / "grid.png", &texts);
  auto grid = parse_png_metadata(texts);
  ASSERT_TRUE(grid);
  ASSERT_EQ(grid->nsfw_flagged.size(), 2u);
  const bool any = grid->nsfw_flagged[0] || grid->nsfw_flagged[1];
  std::printf("[safety] tiny checker on the two tiny-sd images: %d %d\n", int(grid->nsfw_flagged[0]),
              int(grid->nsfw_flagged[1]));
  EXPECT_EQ(r.out.find("safety checker: no image flagged") != std::string::npos, !any) << r.out;
}

namespace {

// Same names, shapes and bytes (dtypes compared through the bytes' size).
void expect_same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size()) << a.path() << " vs " << b.path();
  for (const TensorRecord& t : a.tensors()) {
    const TensorRecord* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name << " missing from " << b.path();
    ASSERT_EQ(t.shape, u->shape) << t.name;
    ASSERT_EQ(t.nbytes(), u->nbytes()) << t.name;
    EXPECT_EQ(std::memcmp(a.bytes(t), b.bytes(*u), t.nbytes()), 0) << t.name;
  }
  std::printf("  %s: %zu tensors identical\n", b.path().filename().c_str(), a.tensors().size());
}

}  // namespace

TEST(SafetyCheckerCli, ConvertWritesTheCheckerInTheOtherFormat) {
  const fs::path dir = test::temp_dir("safety_convert");
  const fs::path checker = test::data_dir() / "tiny-safety-checker";
  const fs::path model = model_with_checker(dir, checker);
  test::CliRun r = test::run_cli({"convert", "--to", "flax", model.string(), "flax"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  r = test::run_cli({"convert", "--to", "safetensors", "flax", "back"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  // transformers' Flax names and layouts, as the golden script writes them (conv kernel HWIO,
  // dense kernels (in, out), `scale`, `embedding`), and back to the same safetensors bytes.
  expect_same_tensors(*open_flax_msgpack(checker / "safety_checker" / "flax_model.msgpack"),
                      *open_flax_msgpack(dir / "flax" / "safety_checker" / "flax_model.msgpack"));
  expect_same_tensors(*SafetensorsFile::open(checker / "safety_checker" / "model.safetensors"),
                      *SafetensorsFile::open(dir / "back" / "safety_checker" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "flax" / "safety_checker" / "model.safetensors"));
}
