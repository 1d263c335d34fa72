// The safety checker in the pipeline (pipeline/safety_check.h): loaded from a model folder's
// safety_checker/ + feature_extractor/ (tests/data/tiny-safety-checker copied beside tiny-sd's
// components), run on uint8-converted images, flags kept beside the unchanged images.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path checker_data() { return test::data_dir() / "tiny-safety-checker"; }

// tiny-sd's components, plus the checker folders of `checker` (a tiny-safety-checker folder) when given.
fs::path model_with_checker(const std::string& name, const fs::path& checker) {
  const fs::path dir = test::temp_dir(name);
  for (const char* part : {"model_index.json", "scheduler", "text_encoder", "tokenizer", "unet", "vae"})
    fs::copy(test::tiny_sd_dir() / part, dir / part, fs::copy_options::recursive);
  if (!checker.empty())
    for (const char* part : {"safety_checker", "feature_extractor"})
      fs::copy(checker / part, dir / part, fs::copy_options::recursive);
  return dir;
}

GenerationRequest request() {
  GenerationRequest r;
  r.prompts = {"a red circle on a blue background", "a small yellow star"};
  r.steps = 2;
  r.seed = 7;
  return r;
}

}  // namespace

TEST(SafetyCheck, FlagsOfGoldenImagesMatchDiffusers) {
  std::string note;
  const auto checker = load_safety_checker(checker_data(), /*prefer_flax=*/false, &note);
  ASSERT_TRUE(checker);
  EXPECT_EQ(checker->format, "safetensors");
  auto g = SafetensorsFile::open(checker_data() / "goldens" / "safety_checker.safetensors");
  Tensor images = g->to_f32("images_u8");  // N × 64 × 64 × 3 byte values → [0, 1] as decoded images are
  for (int64_t i = 0; i < images.numel(); ++i) images.data()[i] /= 255.0f;
  const SafetyScores s = check_image_safety(*checker, images);
  const Tensor want = g->to_f32("has_nsfw");
  ASSERT_EQ(static_cast<int64_t>(s.nsfw.size()), images.dim(0));
  int flagged = 0;
  for (int64_t i = 0; i < images.dim(0); ++i) {
    EXPECT_EQ(s.nsfw[i], want.data()[i] != 0.0f) << "image " << i;
    flagged += s.nsfw[i];
  }
  std::printf("[safety] %d of %lld golden images flagged, as diffusers\n", flagged, static_cast<long long>(images.dim(0)));
}

TEST(SafetyCheck, FlaxMsgpackCheckerWhenPreferred) {
  std::string note;
  const auto checker = load_safety_checker(checker_data(), /*prefer_flax=*/true, &note);
  ASSERT_TRUE(checker);
  EXPECT_EQ(checker->format, "Flax msgpack (f32)");
  EXPECT_EQ(checker->files.front().filename(), "flax_model.msgpack");
}

TEST(SafetyCheck, FlaggedImagesAreKeptAndMarked) {
  ModelLoadOptions o;
  o.weight_cache = false;
  const auto flagging = StableDiffusionModel::load(model_with_checker("always_flags", checker_data() / "always-flags"), o);
  ASSERT_TRUE(flagging->safety_checker());
  ShardedPipeline pipe(flagging);
  const GenerationResult checked = pipe.run(request());
  EXPECT_EQ(checked.nsfw_flagged, std::vector<bool>({true, true}));
  EXPECT_GT(checked.timings.safety_check, 0.0);

  GenerationRequest off = request();
  off.safety_checker = false;
  const GenerationResult unchecked = pipe.run(off);
  EXPECT_TRUE(unchecked.nsfw_flagged.empty());
  ASSERT_EQ(checked.images.numel(), unchecked.images.numel());
  EXPECT_EQ(std::memcmp(checked.images.data(), unchecked.images.data(), sizeof(float) * checked.images.numel()), 0)
      << "a flagged image was changed (blacked out?)";
  float max = 0;
  for (int64_t i = 0; i < checked.images.numel(); ++i) max = std::max(max, checked.images.data()[i]);
  EXPECT_GT(max, 0.0f);
}

TEST(SafetyCheck, NotLoadedWhenAbsentOrTurnedOff) {
  ModelLoadOptions o;
  o.weight_cache = false;
  EXPECT_FALSE(StableDiffusionModel::load(test::tiny_sd_dir(), o)->safety_checker());
  o.load_safety_checker = false;
  EXPECT_FALSE(StableDiffusionModel::load(model_with_checker("turned_off", checker_data()), o)->safety_checker());
}

TEST(SafetyCheck, PickledOnlyCheckerIsANoteAndBrokenWeightsAnError) {
  const fs::path bin_only = model_with_checker("bin_only", {});
  fs::create_directories(bin_only / "safety_checker");
  fs::copy(checker_data() / "safety_checker" / "config.json", bin_only / "safety_checker" / "config.json");
  write_file_atomic(bin_only / "safety_checker" / "pytorch_model.bin", "not read", 8);
  ModelLoadOptions o;
  o.weight_cache = false;
  const auto model = StableDiffusionModel::load(bin_only, o);
  EXPECT_FALSE(model->safety_checker());
  const auto notes = model->load_notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("safety checker is not run"), std::string::npos) << notes.back();

  const fs::path broken = model_with_checker("broken", checker_data());
  fs::resize_file(broken / "safety_checker" / "model.safetensors", 4000);  // truncated
  try {
    StableDiffusionModel::load(broken, o);
    FAIL() << "loaded a truncated safety checker";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}
