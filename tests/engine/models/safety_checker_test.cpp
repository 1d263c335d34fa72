// The safety checker (models/safety_checker.h) against tests/data/tiny-safety-checker/goldens:
// a torch reference of CLIPVisionModel (its encoder layers checked against transformers'
// CLIPTextModel goldens) scored by diffusers' StableDiffusionSafetyChecker, made by
// tools/goldens/make_tiny_safety_checker.py. Every comparison prints its error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/files.h"
#include "io/flax_msgpack.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "models/layers.h"
#include "models/safety_checker.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path checker_dir() { return test::data_dir() / "tiny-safety-checker" / "safety_checker"; }
std::shared_ptr<SafetensorsFile> golden() {
  return SafetensorsFile::open(test::data_dir() / "tiny-safety-checker" / "goldens" / "safety_checker.safetensors");
}
SafetyCheckerConfig config() {
  return SafetyCheckerConfig::from_json(read_text_file(checker_dir() / "config.json"), "config.json");
}

SafetyChecker load_safetensors() {
  auto w = weights_from_safetensors({checker_dir() / "model.safetensors"}, "safety_checker");
  return SafetyChecker::load(*w, config());
}

std::vector<bool> flags(const Tensor& t) {
  std::vector<bool> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data()[i] != 0.0f);
  return out;
}

std::string describe(const std::vector<bool>& v) {
  std::string s;
  for (bool b : v) s += b ? '1' : '0';
  return s;
}

}  // namespace

TEST(SafetyChecker, ConfigOfTheTinyChecker) {
  const SafetyCheckerConfig c = config();
  EXPECT_EQ(c.vision.hidden_size, 32);
  EXPECT_EQ(c.vision.num_hidden_layers, 2);
  EXPECT_EQ(c.vision.image_size, 28);
  EXPECT_EQ(c.vision.patch_size, 7);
  EXPECT_EQ(c.vision.positions(), 17);
  EXPECT_EQ(c.projection_dim, 16);
}

TEST(SafetyChecker, OlderConfigsVisionConfigDictOverridesVisionConfig) {
  const auto c = SafetyCheckerConfig::from_json(
      R"({"projection_dim": 768, "vision_config": {"hidden_size": 768, "patch_size": 32},
          "vision_config_dict": {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                                 "num_hidden_layers": 24, "patch_size": 14}})",
      "sd-config");
  EXPECT_EQ(c.vision.hidden_size, 1024);
  EXPECT_EQ(c.vision.patch_size, 14);
  EXPECT_EQ(c.vision.positions(), 257);  // ViT-L/14 at 224: 16² patches + the class token
  EXPECT_EQ(c.projection_dim, 768);
}

TEST(SafetyChecker, BadConfigsAreRefusedNamingTheFile) {
  try {
    SafetyCheckerConfig::from_json(R"({"vision_config": {"image_size": 30, "patch_size": 7}})", "sc/config.json");
    FAIL() << "accepted an image size that is not a multiple of the patch size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sc/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("patch_size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafetyCheckerConfig::from_json(R"({"vision_config": {"hidden_act": "relu6"}})", "x"), Error);
  EXPECT_THROW(SafetyCheckerConfig::from_json(R"({"projection_dim": -3})", "x"), Error);
  EXPECT_THROW(SafetyCheckerConfig::from_json(R"([1, 2])", "x"), Error);
}

TEST(SafetyChecker, ParityWithDiffusersOnTheTinyChecker) {
  const SafetyChecker checker = load_safetensors();
  auto g = golden();
  const SafetyScores s = checker.check(to_nhwc(g->to_f32("clip_input")));
  test::expect_parity("safety pooled", s.pooled, g->to_f32("pooled"));
  test::expect_parity("safety image_embeds", s.image_embeds, g->to_f32("image_embeds"));
  test::expect_parity("safety special_cos", s.special_cos, g->to_f32("special_cos"));
  test::expect_parity("safety concept_cos", s.concept_cos, g->to_f32("concept_cos"));
  // Scores are rounded to 3 decimals: a cosine within 1e-4 of a rounding boundary may land one
  // step (0.001) away from the reference's.
  test::expect_close_abs("safety special_scores (flax rounding)", s.special_scores, g->to_f32("special_scores"), 1.01e-3);
  test::expect_close_abs("safety concept_scores (flax rounding)", s.concept_scores, g->to_f32("concept_scores"), 1.01e-3);
  const std::vector<bool> want = flags(g->to_f32("has_nsfw")), want_special = flags(g->to_f32("special_care"));
  std::printf("[safety] flags got %s want %s; special care got %s want %s\n", describe(s.nsfw).c_str(),
              describe(want).c_str(), describe(s.special_care).c_str(), describe(want_special).c_str());
  EXPECT_EQ(s.nsfw, want);
  EXPECT_EQ(s.special_care, want_special);
  // The goldens were tuned so that the cases differ: some flagged, some not, one flagged only
  // because special care lowered its thresholds by 0.01.
  EXPECT_NE(std::count(want.begin(), want.end(), true), 0);
  EXPECT_NE(std::count(want.begin(), want.end(), false), 0);
  EXPECT_NE(std::count(want_special.begin(), want_special.end(), true), 0);
}

TEST(SafetyChecker, FlaxMsgpackLoadsTheSameChecker) {
  const SafetyChecker from_safetensors = load_safetensors();
  auto w = weights_from_flax_msgpack(checker_dir() / "flax_model.msgpack", FlaxNaming::Transformers, "flax checker");
  const SafetyChecker from_flax = SafetyChecker::load(*w, config());
  const Tensor input = to_nhwc(golden()->to_f32("clip_input"));
  const SafetyScores a = from_safetensors.check(input), b = from_flax.check(input);
  const test::Diff d = test::diff(b.image_embeds, a.image_embeds);
  std::printf("[safety] flax msgpack vs safetensors image_embeds: max abs diff %g\n", d.max_abs);
  EXPECT_EQ(std::memcmp(a.image_embeds.data(), b.image_embeds.data(), sizeof(float) * a.image_embeds.numel()), 0);
  EXPECT_EQ(a.nsfw, b.nsfw);
}

TEST(SafetyChecker, WrongShapesAndMissingTensorsNameTheTensor) {
  SafetyCheckerConfig c = config();
  c.projection_dim = 8;  // the file's visual_projection is 16 × 32
  auto w = weights_from_safetensors({checker_dir() / "model.safetensors"}, "'tiny checker'");
  try {
    SafetyChecker::load(*w, c);
    FAIL() << "loaded a checker whose projection does not match";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("visual_projection.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny checker"), std::string::npos) << e.what();
  }
  c = config();
  c.vision.num_hidden_layers = 3;  // one layer more than the file holds
  auto w2 = weights_from_safetensors({checker_dir() / "model.safetensors"}, "'tiny checker'");
  try {
    SafetyChecker::load(*w2, c);
    FAIL() << "loaded a checker with a missing layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.layers.2"), std::string::npos) << e.what();
  }
  c = config();
  c.vision.num_hidden_layers = 1;  // the file's second layer is left over
  auto w3 = weights_from_safetensors({checker_dir() / "model.safetensors"}, "'tiny checker'");
  EXPECT_THROW(SafetyChecker::load(*w3, c), Error);
}

TEST(SafetyChecker, Round3IsNumpysAroundInFloat32) {  // values numpy 1.24 gives
  EXPECT_EQ(round3(0.0004f), 0.0f);
  EXPECT_EQ(round3(-0.0004f), -0.0f);
  EXPECT_EQ(round3(0.0006f), 0.001f);
  EXPECT_EQ(round3(0.0125f), 0.012f);  // np.round(np.float32(0.0125), 3): ties to even
  EXPECT_EQ(round3(0.0135f), 0.014f);
  EXPECT_FALSE(round3(0.0005f) > 0.0f);  // 0.0005 · 1000 = 0.5 rounds to even: 0
}
