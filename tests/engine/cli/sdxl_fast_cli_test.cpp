// octodiff-cli generate on the tiny SDXL with a LoRA from --lora and one from the prompt syntax
// (<lora:NAME:STRENGTH> against --lora-dir), and with --decoder taesd --taesd PATH: the images
// against StableDiffusionXLPipeline's with the same LoRAs fused (tests/data/tiny-sdxl-lora) and with
// vae=AutoencoderTiny (tests/data/tiny-taesdxl).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }

nlohmann::json settings() { return nlohmann::json::parse(read_text_file(sdxl_dir() / "goldens" / "prompts.json")); }

// generate on the tiny SDXL with the pipeline goldens' prompts (each followed by `prompt_suffix`),
// negative prompt, steps, guidance and initial latents (written to dir/latents.npy), then args.
test::CliRun sdxl_golden_run(const std::string& prompt_suffix, std::vector<std::string> args, const fs::path& dir) {
  const nlohmann::json s = settings();
  write_npy(dir / "latents.npy", SafetensorsFile::open(sdxl_dir() / "goldens" / "pipeline.safetensors")
                                     ->to_f32("latents_init")
                                     .reshaped({2, 1, 4, 16, 16}));
  std::vector<std::string> all = {"generate", "--model", sdxl_dir().string(), "--compat", "diffusers",
                                  "--latents", "latents.npy", "--steps", std::to_string(s["steps"].get<int>()),
                                  "--guidance", std::to_string(s["guidance"].get<double>()), "--negative-prompt",
                                  s["pipeline_negative_prompt"].get<std::string>(), "--save-array", "images.npy"};
  for (const auto& p : s["pipeline_prompts"]) all.insert(all.end(), {"--prompt", p.get<std::string>() + prompt_suffix});
  all.insert(all.end(), args.begin(), args.end());
  return test::run_cli(all, dir);
}

}  // namespace

TEST(CliSdxlFast, LorasFromTheFlagAndThePromptMatchDiffusers) {
  const fs::path dir = test::temp_dir("cli_sdxl_lora");
  const fs::path loras = test::data_dir() / "tiny-sdxl-lora";
  const test::CliRun r = sdxl_golden_run(" <lora:peft:-0.5>",
                                         {"--lora", (loras / "kohya_ldm.safetensors").string() + ":0.7", "--lora-dir",
                                          loras.string(), "--out", "grid.png"},
                                         dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("(kohya + kohya (LDM names)) strength 0.7: 14 UNet and 3 text-encoder weights, 4 of text_encoder_2"),
            std::string::npos);
  EXPECT_NE(r.out.find("(diffusers/PEFT) strength -0.5"), std::string::npos);
  auto g = SafetensorsFile::open(loras / "goldens.safetensors");
  test::expect_parity("cli sdxl kohya_ldm 0.7 + peft -0.5 images", read_npy(dir / "images.npy").reshaped({2, 32, 32, 3}),
                      g->to_f32("pipeline_kohya_ldm0.7_peft-0.5.images"));
  const auto m = parse_png_metadata(read_png_text(dir / "grid.png"));
  ASSERT_TRUE(m);
  ASSERT_EQ(m->loras.size(), 2u);
  EXPECT_EQ(m->loras[0].name, "kohya_ldm");
  EXPECT_EQ(m->loras[1].name, "peft");
}

TEST(CliSdxlFast, Sd1LoraIsRefusedOnSdxl) {
  const fs::path dir = test::temp_dir("cli_sdxl_lora_refused");
  const fs::path sd1 = test::data_dir() / "tiny-sd-lora" / "kohya.safetensors";
  const test::CliRun r = test::run_cli(
      {"generate", "--model", sdxl_dir().string(), "--prompt", "a cat", "--steps", "1", "--lora", sd1.string()}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(sd1.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SD 1.x/2.x on this SDXL model"), std::string::npos) << r.err;
}

TEST(CliSdxlFast, TaesdDecoderMatchesDiffusers) {
  const fs::path dir = test::temp_dir("cli_sdxl_taesd");
  const fs::path taesd = test::data_dir() / "tiny-taesdxl";
  const test::CliRun r = sdxl_golden_run(
      "", {"--decoder", "taesd", "--taesd", taesd.string(), "--width", "128", "--height", "128", "--out", "grid.png"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto g = SafetensorsFile::open(taesd / "goldens" / "pipeline_tiny_sdxl.safetensors");
  test::expect_parity("cli sdxl TAESDXL images", read_npy(dir / "images.npy").reshaped({2, 128, 128, 3}),
                      g->to_f32("images"));
}
