// octodiff-cli image-to-image and inpainting on tiny SDXL models (--init-image, --strength, --mask,
// with diffusers' random draws injected from .npy): the images match StableDiffusionXLImg2ImgPipeline
// and StableDiffusionXLInpaintPipeline (tests/data/tiny-sdxl/goldens/img2img.safetensors,
// tests/data/tiny-sdxl-inpaint/goldens/inpaint.safetensors) at the parity bar, and the PNG's
// metadata records the run and reads back into the same request settings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
fs::path inpaint_dir() { return test::data_dir() / "tiny-sdxl-inpaint"; }
std::string init(int k) { return (sdxl_dir() / "goldens" / cat("img2img_init_", k, ".png")).string(); }
std::string mask(int k) { return (inpaint_dir() / "goldens" / cat("mask_", k, ".png")).string(); }

// generate --model MODEL with the goldens' prompts, negative prompt, 8 steps, guidance and compat.
std::vector<std::string> golden_generate(const fs::path& model, const std::vector<std::string>& extra) {
  const auto s = nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json"));
  std::vector<std::string> args = {"generate", "--model", model.string(), "--quiet", "--compat", "diffusers",
                                   "--steps", "8", "--guidance", std::to_string(s["guidance"].get<double>()),
                                   "--negative-prompt", s["pipeline_negative_prompt"].get<std::string>()};
  for (const auto& p : s["pipeline_prompts"]) args.insert(args.end(), {"--prompt", p.get<std::string>()});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Writes golden tensor `name` as (2, 1, 4, 32, 16) float32 .npy into dir.
std::string npy(const SafetensorsFile& g, const std::string& name, const fs::path& dir) {
  write_npy(dir / (name + ".npy"), g.to_f32(name).reshaped({2, 1, 4, 32, 16}));
  return name + ".npy";
}

std::optional<ImageMetadata> metadata_of(const fs::path& png) { return parse_png_metadata(read_png_text(png)); }

std::string parameters(const fs::path& png) {
  for (const PngText& t : read_png_text(png))
    if (t.key == "parameters") return t.text;
  return "";
}

}  // namespace

TEST(CliSdxlImage, ImageToImageMatchesDiffusersAndRecordsItsStrength) {
  const fs::path dir = test::temp_dir("cli_sdxl_img2img");
  auto g = SafetensorsFile::open(sdxl_dir() / "goldens" / "img2img.safetensors");
  const test::CliRun r = test::run_cli(
      golden_generate(sdxl_dir(), {"--init-image", init(0), "--init-image", init(1), "--strength", "0.75", "--noise",
                                   npy(*g, "noise", dir), "--posterior-noise", npy(*g, "posterior_noise", dir),
                                   "--save-array", "images.npy", "--out", "grid.png", "--out-dir", "each"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  test::expect_parity("cli sdxl img2img euler_s0.75 images", read_npy(dir / "images.npy").reshaped({2, 64, 32, 3}),
                      g->to_f32("euler_s0.75.images"));
  fs::path first;  // one image's own PNG
  for (const auto& e : fs::directory_iterator(dir / "each"))
    if (e.path().extension() == ".png") first = e.path();
  ASSERT_FALSE(first.empty());
  EXPECT_NE(parameters(first).find("Denoising strength: 0.75"), std::string::npos) << parameters(first);
  const auto m = metadata_of(first);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->denoising_strength, 0.75);
  EXPECT_EQ(m->compat, Compat::Diffusers);
  EXPECT_EQ(m->width, 32);
  EXPECT_EQ(m->height, 64);
  const GenerationRequest again = request_from_metadata(*m);
  EXPECT_EQ(again.strength, 0.75);
  EXPECT_EQ(again.compat, Compat::Diffusers);
  EXPECT_TRUE(again.scheduler == SchedulerKind::Euler);
}

TEST(CliSdxlImage, NineChannelInpaintMatchesDiffusersAndRecordsItsSettings) {
  const fs::path dir = test::temp_dir("cli_sdxl_inpaint");
  auto g = SafetensorsFile::open(inpaint_dir() / "goldens" / "inpaint.safetensors");
  const test::CliRun r = test::run_cli(
      golden_generate(inpaint_dir(),
                      {"--init-image", init(0), "--init-image", init(1), "--mask", mask(0), "--mask", mask(1),
                       "--strength", "0.75", "--noise", npy(*g, "noise", dir), "--posterior-noise",
                       npy(*g, "posterior_noise", dir), "--masked-posterior-noise",
                       npy(*g, "masked_posterior_noise", dir), "--save-array", "images.npy", "--out", "grid.png"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  test::expect_parity("cli sdxl inpaint ch9_euler_s0.75 images", read_npy(dir / "images.npy").reshaped({2, 64, 32, 3}),
                      g->to_f32("ch9_euler_s0.75.images"));
  const std::string text = parameters(dir / "grid.png");
  for (const char* key : {"Denoising strength: 0.75", "Mask blur: 0", "Inpaint area: Whole picture",
                          "Masked content: original", "Inpaint mode: 9-channel unet"})
    EXPECT_NE(text.find(key), std::string::npos) << "'" << key << "' missing from: " << text;
}

// A 4-channel SDXL model: one mask for both devices, blur and only-masked; the settings read back.
TEST(CliSdxlImage, FourChannelInpaintWithBlurAndOnlyMasked) {
  const fs::path dir = test::temp_dir("cli_sdxl_inpaint_blend");
  const test::CliRun r = test::run_cli(
      {"generate", "--model", sdxl_dir().string(), "--quiet", "--prompt", "x", "--prompt", "y", "--steps", "3",
       "--init-image", init(1), "--mask", mask(1), "--mask-blur", "2", "--inpaint-area", "masked",
       "--inpaint-padding", "4", "--save-array", "images.npy", "--out", "grid.png"},
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(read_npy(dir / "images.npy").shape(), (Shape{2, 1, 64, 32, 3}));
  const auto m = metadata_of(dir / "grid.png");
  ASSERT_TRUE(m && m->inpaint);
  EXPECT_EQ(m->inpaint->mode, "latent blend");
  EXPECT_EQ(m->denoising_strength, 1.0);  // --mask: strength 1 by default
  const GenerationRequest again = request_from_metadata(*m);
  EXPECT_EQ(again.mask_blur, 2);
  EXPECT_TRUE(again.inpaint_only_masked);
  EXPECT_EQ(again.only_masked_padding, 4);
}

// diffusers' size conditioning on an image-to-image run: the images match the golden and the
// PNG's JSON carries the sizes back into the request.
TEST(CliSdxlImage, SizeConditionedImageToImageRoundTrips) {
  const fs::path dir = test::temp_dir("cli_sdxl_img2img_micro");
  auto g = SafetensorsFile::open(sdxl_dir() / "goldens" / "img2img.safetensors");
  const test::CliRun r = test::run_cli(
      golden_generate(sdxl_dir(), {"--init-image", init(0), "--init-image", init(1), "--strength", "0.75", "--noise",
                                   npy(*g, "noise", dir), "--posterior-noise", npy(*g, "posterior_noise", dir),
                                   "--original-size", "80x96", "--crop-top-left", "4,8", "--target-size", "40x48",
                                   "--save-array", "images.npy", "--out", "grid.png"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  test::expect_parity("cli sdxl img2img euler_s0.75_micro images",
                      read_npy(dir / "images.npy").reshaped({2, 64, 32, 3}), g->to_f32("euler_s0.75_micro.images"));
  const auto m = metadata_of(dir / "grid.png");
  ASSERT_TRUE(m);
  const SdxlSizeConditioning z = request_from_metadata(*m).sdxl_size;
  EXPECT_EQ(std::vector<int>({z.original_height, z.original_width, z.crop_top, z.crop_left, z.target_height,
                              z.target_width}),
            std::vector<int>({96, 80, 4, 8, 48, 40}));
}
