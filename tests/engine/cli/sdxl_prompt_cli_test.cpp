// octodiff-cli generate on the tiny SDXL with A1111 prompts: --prompt-syntax a1111, --long-prompts
// chunk and SDXL embeddings (--embeddings) against StableDiffusionXLPipeline given the A1111
// embeddings (tests/data/tiny-sdxl-prompts/pipeline.safetensors, case "cfg"), and the SDXL options
// in the PNG the CLI writes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path prompts_dir() { return test::data_dir() / "tiny-sdxl-prompts"; }

}  // namespace

TEST(CliSdxlPrompts, A1111SyntaxChunksAndEmbeddingsMatchDiffusers) {
  const fs::path dir = test::temp_dir("cli_sdxl_prompts");
  auto g = SafetensorsFile::open(prompts_dir() / "pipeline.safetensors");
  write_npy(dir / "latents.npy", g->to_f32("latents_init").reshaped({1, 1, 4, 16, 16}));
  const auto s = nlohmann::json::parse(g->metadata().at("settings"));
  const test::CliRun r = test::run_cli(
      {"generate", "--model", (test::data_dir() / "tiny-sdxl").string(), "--quiet", "--prompt",
       s["prompt"].get<std::string>(), "--negative-prompt", s["negative_prompt"].get<std::string>(),
       "--prompt-syntax", "a1111", "--long-prompts", "chunk", "--embeddings", (prompts_dir() / "embeddings").string(),
       "--steps", std::to_string(s["steps"].get<int>()), "--guidance", std::to_string(s["guidance"].get<double>()),
       "--compat", "diffusers", "--latents", "latents.npy", "--original-size", "40x48", "--save-array", "images.npy",
       "--out", "grid.png"},
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  // --original-size 40x48 changes the time ids, so this run is not the golden's: run it again without.
  const std::vector<PngText> texts = read_png_text(dir / "grid.png");
  bool found = false;
  for (const PngText& t : texts)
    if (t.key == "parameters") {
      found = true;
      EXPECT_NE(t.text.find("Compat: diffusers, Original size: 40x48"), std::string::npos) << t.text;
      EXPECT_NE(t.text.find("Prompt syntax: a1111, Long prompts: chunk"), std::string::npos) << t.text;
    }
  EXPECT_TRUE(found);
  const test::CliRun golden = test::run_cli(
      {"generate", "--model", (test::data_dir() / "tiny-sdxl").string(), "--quiet", "--prompt",
       s["prompt"].get<std::string>(), "--negative-prompt", s["negative_prompt"].get<std::string>(),
       "--prompt-syntax", "a1111", "--long-prompts", "chunk", "--embeddings", (prompts_dir() / "embeddings").string(),
       "--steps", std::to_string(s["steps"].get<int>()), "--guidance", std::to_string(s["guidance"].get<double>()),
       "--compat", "diffusers", "--latents", "latents.npy", "--save-array", "golden.npy", "--out", "golden.png"},
      dir);
  ASSERT_EQ(golden.code, 0) << golden.err << golden.out;
  test::expect_parity("cli sdxl a1111 images", read_npy(dir / "golden.npy").reshaped({1, 32, 32, 3}),
                      g->to_f32("cfg.images"));
}
