// octodiff-cli inpainting: --mask (one or one per device), --mask-blur, --inpaint-area,
// --inpaint-padding, --masked-posterior-noise; the PNG records A1111's inpainting keys; bad input
// gets clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

std::string init(int k) { return (test::tiny_sd_dir() / "goldens" / cat("img2img_init_", k, ".png")).string(); }
std::string mask(int k) { return (test::data_dir() / "tiny-sd-inpaint" / "goldens" / cat("mask_", k, ".png")).string(); }

std::vector<std::string> generate(const fs::path& model, std::vector<std::string> args) {
  args.insert(args.begin(), {"generate", "--model", model.string(), "--steps", "3", "--quiet"});
  return args;
}

std::string parameters(const fs::path& png) {
  for (const PngText& t : read_png_text(png))
    if (t.key == "parameters") return t.text;
  return "";
}

}  // namespace

// A 9-channel model, one mask per device, blur and only-masked: the PNG records the inpainting
// settings and they read back into a request.
TEST(CliInpaint, NineChannelRunRecordsItsSettings) {
  auto dir = test::temp_dir("cli_inpaint");
  const fs::path model = test::data_dir() / "tiny-sd-inpaint";
  const std::vector<std::string> common = {"--prompt", "x", "--prompt", "y", "--init-image", init(0), "--init-image",
                                           init(1), "--mask", mask(0), "--mask", mask(1), "--mask-blur", "3",
                                           "--inpaint-area", "masked", "--inpaint-padding", "6", "--strength", "0.7"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return generate(model, a);
  };
  CliRun a = test::run_cli(with({"--seed", "4", "--save-array", "a.npy", "--out", "a.png"}), dir);
  ASSERT_EQ(a.code, 0) << a.err;
  const std::string text = parameters(dir / "a.png");
  for (const char* key : {"Denoising strength: 0.7", "Mask blur: 3", "Inpaint area: Only masked",
                          "Masked area padding: 6", "Masked content: original", "Inpaint mode: 9-channel unet"})
    EXPECT_NE(text.find(key), std::string::npos) << "'" << key << "' missing from: " << text;
  const auto m = parse_png_metadata(read_png_text(dir / "a.png"));
  ASSERT_TRUE(m && m->inpaint);
  EXPECT_EQ(m->inpaint->mask_blur, 3);
  EXPECT_TRUE(m->inpaint->only_masked);
  EXPECT_EQ(m->inpaint->padding, 6);
  const GenerationRequest again = request_from_metadata(*m);
  EXPECT_EQ(again.mask_blur, 3);
  EXPECT_TRUE(again.inpaint_only_masked);
  EXPECT_EQ(again.only_masked_padding, 6);
  EXPECT_EQ(again.strength, 0.7);
  const Tensor images = read_npy(dir / "a.npy");
  EXPECT_EQ(images.shape(), (Shape{2, 1, 64, 64, 3}));
}

// A 4-channel model with one mask for both devices; --strength defaults to 1 with --mask.
TEST(CliInpaint, FourChannelBlendDefaultsToStrengthOne) {
  auto dir = test::temp_dir("cli_inpaint_blend");
  CliRun r = test::run_cli(test::tiny_generate({"--prompt", "x", "--prompt", "y", "--steps", "3", "--quiet",
                                                "--init-image", init(0), "--mask", mask(1), "--out", "b.png"}),
                           dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = parameters(dir / "b.png");
  for (const char* key : {"Denoising strength: 1", "Mask blur: 0", "Inpaint area: Whole picture",
                          "Masked content: latent noise", "Inpaint mode: latent blend"})
    EXPECT_NE(text.find(key), std::string::npos) << "'" << key << "' missing from: " << text;
}

TEST(CliInpaint, BadInputGetsClearErrors) {
  auto dir = test::temp_dir("cli_inpaint_errors");
  { std::ofstream(dir / "mask.txt") << "white means repaint"; }
  const std::string black = (dir / "black.png").string();
  write_png(black, Image8{64, 64, std::vector<uint8_t>(64 * 64 * 3, 0)}, {});
  const std::string small = (dir / "small.png").string();
  write_png(small, Image8{32, 32, std::vector<uint8_t>(32 * 32 * 3, 255)}, {});
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  auto tiny = [](std::vector<std::string> a) { return test::tiny_generate(std::move(a)); };
  const std::vector<Case> cases = {
      {tiny({"--prompt", "x", "--mask", mask(0)}), "--mask needs --init-image"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask", "mask.txt"}), "mask.txt"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask", small}), "mask 1 is 32×32 pixels"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask", black}), "mask 1 is entirely black"},
      {tiny({"--prompt", "x", "--prompt", "y", "--init-image", init(0), "--mask", mask(0), "--mask", mask(1), "--mask",
             mask(0)}),
       "3 masks for 2 devices"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask", mask(0), "--mask-blur", "-2"}),
       "--mask-blur must be between 0"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask", mask(0), "--inpaint-area", "box"}),
       "--inpaint-area must be 'whole' or 'masked'"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--mask-blur", "4"}), "need --mask"},
  };
  for (const auto& c : cases) {
    CliRun r = test::run_cli(c.args, dir);
    std::printf("[cli inpaint error] exit %d: %s", r.code, r.err.c_str());
    EXPECT_NE(r.code, 0);
    EXPECT_LT(r.code, 128) << "crashed";
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
}
