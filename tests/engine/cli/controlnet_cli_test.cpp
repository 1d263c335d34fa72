// octodiff-cli ControlNet options: --controlnet PATH[:SCALE], --control-image, --control-preprocess,
// --control-start/--control-end, the A1111 metadata they leave, and clear errors for bad input.
#include <gtest/gtest.h>

#include <fstream>

#include "io/npy.h"
#include "io/png.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

std::string cn(const std::string& name) { return (test::data_dir() / "tiny-controlnet" / name).string(); }

std::string parameters_of(const fs::path& png) {
  for (const PngText& t : read_png_text(png))
    if (t.key == "parameters") return t.text;
  return "";
}

}  // namespace

TEST(CliControlNet, TwoControlNetsRunAndAreRecordedAsA1111Does) {
  const fs::path dir = test::temp_dir("cli_controlnet");
  const auto base = test::tiny_generate({"--prompt", "x", "--prompt", "y", "--steps", "3", "--seed", "3", "--quiet"});
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  test::CliRun plain = test::run_cli(with({"--save-array", "plain.npy", "--out", "plain.png"}), dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  test::CliRun r = test::run_cli(
      with({"--controlnet", cn("controlnet_a") + ":0.8", "--control-image", cn("control_0.png"), "--controlnet",
            cn("controlnet_a_ldm.safetensors"), "--control-image", cn("control_2.png"), "--control-preprocess",
            "canny", "--control-start", "0.2", "--save-array", "cn.npy", "--out", "cn.png"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string p = parameters_of(dir / "cn.png");
  std::printf("%s\n", p.c_str());
  EXPECT_NE(p.find("ControlNet 0: \"Module: canny, Model: controlnet_a, Weight: 0.8, Threshold A: 100.0, "
                   "Threshold B: 200.0, Guidance Start: 0.2, Guidance End: 1.0\""),
            std::string::npos);
  EXPECT_NE(p.find("ControlNet 1: \"Module: canny, Model: controlnet_a_ldm, Weight: 1.0"), std::string::npos);
  const test::Diff d = test::diff(read_npy(dir / "cn.npy"), read_npy(dir / "plain.npy"));
  std::printf("[controlnet cli] images moved by %.3e from the run without ControlNets\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-3);
}

TEST(CliControlNet, BadInputGetsClearErrors) {
  const fs::path dir = test::temp_dir("cli_controlnet_bad");
  std::ofstream(dir / "not_a.png") << "this is text, not a PNG";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = test::tiny_generate({"--prompt", "x", "--steps", "2", "--quiet"});
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a, dir);
  };
  test::CliRun unreadable = run({"--controlnet", cn("controlnet_a"), "--control-image", "not_a.png"});
  EXPECT_NE(unreadable.code, 0);
  EXPECT_NE(unreadable.err.find("--control-image 'not_a.png' cannot be read"), std::string::npos) << unreadable.err;
  test::CliRun count = run({"--controlnet", cn("controlnet_a"), "--controlnet", cn("controlnet_b"), "--control-image",
                            cn("control_0.png")});
  EXPECT_NE(count.code, 0);
  EXPECT_NE(count.err.find("2 --controlnet but 1 --control-image"), std::string::npos) << count.err;
  test::CliRun alone = run({"--control-image", cn("control_0.png")});
  EXPECT_NE(alone.code, 0);
  EXPECT_NE(alone.err.find("need --controlnet"), std::string::npos) << alone.err;
  test::CliRun module = run({"--controlnet", cn("controlnet_a"), "--control-image", cn("control_0.png"),
                             "--control-preprocess", "depth"});
  EXPECT_NE(module.err.find("unknown control image preprocessor 'depth'"), std::string::npos) << module.err;
  test::CliRun other = run({"--controlnet", (test::tiny_sd_dir() / "unet").string(), "--control-image",
                            cn("control_0.png")});
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.err.find("not a ControlNetModel"), std::string::npos) << other.err;
}

TEST(CliControlNet, MakeRandomModelWritesAnSd15ControlNetConfig) {
  const fs::path dir = test::temp_dir("cli_random_controlnet");
  test::CliRun r = test::run_cli({"make-random-model", "--arch", "controlnet-sd15", "--layout", "diffusers", "--out",
                                  "cn", "--configs-only"},
                                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  // diffusers' ControlNetModel.from_config of this file has 361,279,120 parameters (checked with v0.31.0).
  EXPECT_NE(r.out.find("361279120 parameters"), std::string::npos) << r.out;
  const std::string config = read_text_file(dir / "cn" / "config.json");
  EXPECT_NE(config.find("\"_class_name\": \"ControlNetModel\""), std::string::npos);
  EXPECT_NE(config.find("\"conditioning_embedding_out_channels\""), std::string::npos);
  test::CliRun single = test::run_cli({"make-random-model", "--arch", "controlnet-sd15", "--layout", "single-file",
                                       "--out", "s"},
                                      dir);
  EXPECT_NE(single.code, 0);
  EXPECT_NE(single.err.find("ControlNetModel folder only"), std::string::npos) << single.err;
}
