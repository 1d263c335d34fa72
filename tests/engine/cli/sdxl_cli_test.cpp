// octodiff-cli generate on the tiny SDXL: diffusers' size conditioning from the command line
// (--original-size, --crop-top-left, --target-size) against StableDiffusionXLPipeline's images
// (tests/data/tiny-sdxl/goldens/pipeline.safetensors, case "micro"), and the errors around it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/npy.h"
#include "io/safetensors.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

test::CliRun sdxl_generate(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), {"generate", "--model", sdxl_dir().string(), "--quiet"});
  return test::run_cli(args, cwd);
}

}  // namespace

TEST(CliSdxl, SizeConditioningMatchesDiffusers) {
  const fs::path dir = test::temp_dir("cli_sdxl_micro");
  auto g = SafetensorsFile::open(sdxl_dir() / "goldens" / "pipeline.safetensors");
  write_npy(dir / "latents.npy", g->to_f32("latents_init").reshaped({2, 1, 4, 16, 16}));
  const auto s = nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json"));
  const auto& micro = s["micro"];
  // diffusers' (height, width) pairs, given as WxH; the crop as TOP,LEFT.
  auto wxh = [](const nlohmann::json& hw) { return std::to_string(hw[1].get<int>()) + "x" + std::to_string(hw[0].get<int>()); };
  const std::string crop = std::to_string(micro["crops_coords_top_left"][0].get<int>()) + "," +
                           std::to_string(micro["crops_coords_top_left"][1].get<int>());
  const test::CliRun r = sdxl_generate(
      {"--prompt", s["pipeline_prompts"][0].get<std::string>(), "--prompt", s["pipeline_prompts"][1].get<std::string>(),
       "--negative-prompt", s["pipeline_negative_prompt"].get<std::string>(), "--steps", std::to_string(s["steps"].get<int>()),
       "--guidance", std::to_string(s["guidance"].get<double>()), "--compat", "diffusers", "--latents", "latents.npy",
       "--original-size", wxh(micro["original_size"]), "--crop-top-left", crop, "--target-size", wxh(micro["target_size"]),
       "--save-array", "images.npy", "--out", "grid.png"},
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("SDXL"), std::string::npos) << r.out;  // the model line names it
  test::expect_parity("cli sdxl micro images", read_npy(dir / "images.npy").reshaped({2, 32, 32, 3}),
                      g->to_f32("micro.images"));
}

TEST(CliSdxl, SizeOptionsAreRefusedWhereTheyDoNotApply) {
  const fs::path dir = test::temp_dir("cli_sdxl_errors");
  test::CliRun r = sdxl_generate({"--prompt", "a cat", "--steps", "1", "--original-size", "64x64"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--compat diffusers"), std::string::npos) << r.err;
  r = sdxl_generate({"--prompt", "a cat", "--steps", "1", "--compat", "diffusers", "--crop-top-left", "4x8"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--crop-top-left expects two non-negative integers"), std::string::npos) << r.err;
  r = test::run_cli(test::tiny_generate({"--prompt", "a cat", "--steps", "1", "--compat", "diffusers",
                                         "--target-size", "64x64"}),
                    dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("SDXL models only"), std::string::npos) << r.err;
}
