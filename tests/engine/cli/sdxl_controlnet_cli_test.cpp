// octodiff-cli generate --controlnet on the tiny SDXL against diffusers'
// StableDiffusionXLControlNetPipeline (tests/data/tiny-sdxl-controlnet/goldens.safetensors, case
// "shared": one ControlNet, one control image for both prompts, scale 0.7, guidance end 0.8),
// the metadata it leaves, and a ControlNet of the other family refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/files.h"
#include "models/controlnet.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
std::string cn(const std::string& name) { return (test::data_dir() / "tiny-sdxl-controlnet" / name).string(); }

test::CliRun sdxl_generate(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), {"generate", "--model", sdxl_dir().string(), "--quiet"});
  return test::run_cli(args, cwd);
}

std::string parameters_of(const fs::path& png) {
  for (const PngText& t : read_png_text(png))
    if (t.key == "parameters") return t.text;
  return "";
}

}  // namespace

TEST(CliSdxlControlNet, MatchesStableDiffusionXLControlNetPipeline) {
  const fs::path dir = test::temp_dir("cli_sdxl_controlnet");
  auto base = SafetensorsFile::open(sdxl_dir() / "goldens" / "pipeline.safetensors");
  write_npy(dir / "latents.npy", base->to_f32("latents_init").reshaped({2, 1, 4, 16, 16}));
  const auto s = nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json"));
  const test::CliRun r = sdxl_generate(
      {"--prompt", s["pipeline_prompts"][0].get<std::string>(), "--prompt", s["pipeline_prompts"][1].get<std::string>(),
       "--negative-prompt", s["pipeline_negative_prompt"].get<std::string>(), "--steps",
       std::to_string(s["steps"].get<int>()), "--guidance", std::to_string(s["guidance"].get<double>()), "--compat",
       "diffusers", "--latents", "latents.npy", "--height", "32", "--width", "32", "--controlnet",
       cn("controlnet_a") + ":0.7", "--control-image", cn("control_2.png"), "--control-end", "0.8", "--save-array",
       "images.npy", "--out", "cn.png"},
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto g = SafetensorsFile::open(cn("goldens.safetensors"));
  test::expect_parity("cli sdxl controlnet images", read_npy(dir / "images.npy").reshaped({2, 32, 32, 3}),
                      g->to_f32("shared.images"));
  const std::string p = parameters_of(dir / "cn.png");
  std::printf("%s\n", p.c_str());
  EXPECT_NE(p.find("ControlNet 0: \"Module: none, Model: controlnet_a, Weight: 0.7"), std::string::npos) << p;
  EXPECT_NE(p.find("Guidance End: 0.8"), std::string::npos) << p;
}

TEST(CliSdxlControlNet, AnSd15ControlNetIsRefusedOnSdxl) {
  const fs::path dir = test::temp_dir("cli_sdxl_controlnet_other");
  const std::string sd_cn = (test::data_dir() / "tiny-controlnet" / "controlnet_a").string();
  const test::CliRun r = sdxl_generate({"--prompt", "a cat", "--steps", "1", "--controlnet", sd_cn, "--control-image",
                                        cn("control_0.png")},
                                       dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("an SD 1.x/2.x ControlNet on an SDXL model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cross_attention_dim 32 vs the UNet's 80"), std::string::npos) << r.err;
}

TEST(CliSdxlControlNet, MakeRandomModelWritesAnSdxlControlNetConfig) {
  const fs::path dir = test::temp_dir("cli_random_controlnet_sdxl");
  test::CliRun r = test::run_cli({"make-random-model", "--arch", "controlnet-sdxl", "--layout", "diffusers", "--out",
                                  "cn", "--configs-only"},
                                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("random ControlNet ("), std::string::npos) << r.out;
  const ControlNetConfig c =
      ControlNetConfig::from_json(read_text_file(dir / "cn" / "config.json"), (dir / "cn" / "config.json").string());
  EXPECT_EQ(c.mismatch_with(UNetConfig::sdxl()), "");
  EXPECT_TRUE(c.unet.text_time());
  EXPECT_EQ(c.unet.transformer_layers_per_block, (std::vector<int>{1, 2, 10}));
  EXPECT_EQ(c.conditioning_embedding_out_channels, (std::vector<int>{16, 32, 96, 256}));
  EXPECT_NE(read_text_file(dir / "cn" / "README.md").find("ControlNetModel for SDXL"), std::string::npos);
}
