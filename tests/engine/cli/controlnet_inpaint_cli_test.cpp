// octodiff-cli with --mask and --controlnet together (diffusers' StableDiffusionControlNetInpaintPipeline;
// parity in tests/engine/pipeline/controlnet_inpaint_test.cpp): a 9-channel inpainting model with a
// ControlNet that reads the 4 latent channels, only-masked, and the PNG records both settings; the
// VAE tiling options of generate and their errors.
#include <gtest/gtest.h>

#include "cli_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

std::string init(int k) { return (test::tiny_sd_dir() / "goldens" / cat("img2img_init_", k, ".png")).string(); }
std::string mask(int k) { return (test::data_dir() / "tiny-sd-inpaint" / "goldens" / cat("mask_", k, ".png")).string(); }
std::string cn(const std::string& rel) { return (test::data_dir() / rel).string(); }

std::string parameters(const fs::path& png) {
  for (const PngText& t : read_png_text(png))
    if (t.key == "parameters") return t.text;
  return "";
}

std::vector<std::string> inpaint9(std::vector<std::string> extra) {
  std::vector<std::string> a = {"generate", "--model", cn("tiny-sd-inpaint"), "--steps", "3", "--quiet", "--prompt",
                                "x", "--prompt", "y", "--init-image", init(0), "--init-image", init(1), "--mask",
                                mask(0), "--mask", mask(1), "--seed", "5"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST(CliControlNetInpaint, NineChannelModelWithAControlNetRunsAndRecordsBoth) {
  const fs::path dir = test::temp_dir("cli_controlnet_inpaint");
  test::CliRun plain = test::run_cli(inpaint9({"--save-array", "plain.npy", "--out", "plain.png"}), dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  test::CliRun r = test::run_cli(
      inpaint9({"--controlnet", cn("tiny-controlnet-inpaint/controlnet_9") + ":0.8", "--control-image",
                cn("tiny-controlnet/control_0.png"), "--inpaint-area", "masked", "--inpaint-padding", "8",
                "--save-array", "cn.npy", "--out", "cn.png"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string p = parameters(dir / "cn.png");
  for (const char* key : {"ControlNet 0: \"Module: none, Model: controlnet_9, Weight: 0.8", "Inpaint area: Only masked",
                          "Inpaint mode: 9-channel unet"})
    EXPECT_NE(p.find(key), std::string::npos) << "'" << key << "' missing from: " << p;
  const test::Diff d = test::diff(read_npy(dir / "cn.npy"), read_npy(dir / "plain.npy"));
  std::printf("[controlnet inpaint cli] images moved by %.3e from the run without the ControlNet\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-3);
}

TEST(CliControlNetInpaint, VaeTilingOptions) {
  const fs::path dir = test::temp_dir("cli_vae_tiling");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = test::tiny_generate({"--prompt", "x", "--steps", "2", "--quiet", "--height", "64",
                                                      "--width", "64"});
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a, dir);
  };
  test::CliRun on = run({"--vae-tiling", "on", "--vae-tile", "32", "--vae-tile-overlap", "16", "--out", "on.png"});
  ASSERT_EQ(on.code, 0) << on.err;
  EXPECT_NE(parameters(dir / "on.png").find("VAE tile: 32, VAE tile overlap: 16"), std::string::npos)
      << parameters(dir / "on.png");
  test::CliRun off = run({"--vae-tiling", "off", "--out", "off.png"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(parameters(dir / "off.png").find("VAE tile"), std::string::npos);
  test::CliRun bad_mode = run({"--vae-tiling", "maybe"});
  EXPECT_NE(bad_mode.code, 0);
  EXPECT_NE(bad_mode.err.find("unknown VAE tiling 'maybe'"), std::string::npos) << bad_mode.err;
  test::CliRun odd = run({"--vae-tile", "33"});  // tiny-sd's VAE scale is 2
  EXPECT_NE(odd.code, 0);
  EXPECT_NE(odd.err.find("--vae-tile 33 is not a multiple of the VAE's scale factor 2"), std::string::npos) << odd.err;
  test::CliRun wide = run({"--vae-tile", "32", "--vae-tile-overlap", "20"});
  EXPECT_NE(wide.code, 0);
  EXPECT_NE(wide.err.find("half the tile size"), std::string::npos) << wide.err;
}
