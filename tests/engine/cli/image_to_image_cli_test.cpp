// octodiff-cli image-to-image: --init-image (one or one per device), --strength, --noise and
// --posterior-noise; bad input gets clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "io/files.h"
#include "io/npy.h"
#include "io/png.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

CliRun cli(const std::vector<std::string>& args, const fs::path& cwd) { return test::run_cli(args, cwd); }

std::vector<std::string> tiny(std::vector<std::string> args) { return test::tiny_generate(std::move(args)); }

std::string init(int k) { return (test::tiny_sd_dir() / "goldens" / ("img2img_init_" + std::to_string(k) + ".png")).string(); }

}  // namespace

TEST(CliImageToImage, OnePerDeviceWithInjectedNoiseReproducesTheDrawnRun) {
  auto dir = test::temp_dir("cli_img2img");
  const std::vector<std::string> common = {"--prompt", "x", "--prompt", "y", "--steps", "4", "--strength", "0.5",
                                           "--init-image", init(0), "--init-image", init(1), "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return tiny(a);
  };
  CliRun a = cli(with({"--seed", "5", "--save-latents", "noise.npy", "--save-array", "a.npy", "--out", "a.png"}), dir);
  ASSERT_EQ(a.code, 0) << a.err;
  bool strength_recorded = false;
  for (const PngText& t : read_png_text(dir / "a.png"))
    if (t.key == "parameters") strength_recorded = t.text.find("Denoising strength: 0.5") != std::string::npos;
  EXPECT_TRUE(strength_recorded) << "the PNG's A1111 parameters lack 'Denoising strength: 0.5'";
  Tensor noise = read_npy(dir / "noise.npy");
  ASSERT_EQ(noise.shape(), (Shape{2, 1, 4, 32, 32}));
  // Flax draws ε with the same key as the noise, in NHWC order: give both explicitly, other seed.
  Tensor eps = Tensor::empty(noise.shape());
  const int64_t n = 4 * 32 * 32;
  for (int d = 0; d < 2; ++d)
    for (int c = 0; c < 4; ++c)
      for (int p = 0; p < 1024; ++p) eps[d * n + c * 1024 + p] = noise[d * n + p * 4 + c];
  write_npy(dir / "eps.npy", eps);
  CliRun b = cli(with({"--seed", "999", "--noise", "noise.npy", "--posterior-noise", "eps.npy", "--save-array", "b.npy",
                       "--out", "b.png"}),
                 dir);
  ASSERT_EQ(b.code, 0) << b.err;
  Tensor ia = read_npy(dir / "a.npy"), ib = read_npy(dir / "b.npy");
  ASSERT_EQ(ia.shape(), (Shape{2, 1, 64, 64, 3}));
  for (int64_t i = 0; i < ia.numel(); ++i) ASSERT_EQ(ia[i], ib[i]);
}

TEST(CliImageToImage, BadInputGetsClearErrors) {
  auto dir = test::temp_dir("cli_img2img_errors");
  { std::ofstream(dir / "corrupt.png") << "\x89PNG\r\n\x1a\nthis is not a png"; }
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {tiny({"--prompt", "x", "--init-image", "missing.png"}), "missing.png"},
      {tiny({"--prompt", "x", "--init-image", "corrupt.png"}), "corrupt.png"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--strength", "0"}), "strength must be in (0, 1]"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--strength", "1.2"}), "strength must be in (0, 1]"},
      {tiny({"--prompt", "x", "--init-image", init(0), "--height", "32"}), "the init images are 64×64"},
      {tiny({"--prompt", "x", "--prompt", "y", "--init-image", init(0), "--init-image", init(1), "--init-image",
             init(0)}),
       "3 init images for 2 devices"},
      {tiny({"--prompt", "x", "--strength", "0.5"}), "need --init-image"},
  };
  for (const auto& c : cases) {
    CliRun r = cli(c.args, dir);
    std::printf("[cli img2img error] exit %d: %s", r.code, r.err.c_str());
    EXPECT_NE(r.code, 0);
    EXPECT_LT(r.code, 128) << "crashed";
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
}
