// octodiff-cli generate with LoRAs: --lora FILE[:STRENGTH], the <lora:NAME:STRENGTH> prompt syntax
// against --lora-dir, and what the PNG metadata says about them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "io/files.h"
#include "io/npy.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

// generate on the tiny model, 2 steps, seed 3, then args.
CliRun cli(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), {"--steps", "2", "--seed", "3"});
  return test::run_cli(test::tiny_generate(std::move(args)), cwd);
}

fs::path lora_dir() { return test::data_dir() / "tiny-sd-lora"; }

}  // namespace

TEST(CliLora, FlagsAndPromptSyntaxLoadTheLorasAndTheMetadataSaysSo) {
  const fs::path dir = test::temp_dir("cli_lora");
  CliRun plain = cli({"--prompt", "a cat", "--out", "plain.png", "--save-array", "plain.npy"}, dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  CliRun r = cli({"--prompt", "a cat <lora:peft:-0.5>", "--lora", (lora_dir() / "kohya.safetensors").string() + ":0.5",
                  "--lora-dir", lora_dir().string(), "--out", "lora.png", "--save-array", "lora.npy"},
                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("lora: " + (lora_dir() / "kohya.safetensors").string() + " (kohya) strength 0.5"), std::string::npos);
  EXPECT_NE(r.out.find("(diffusers/PEFT) strength -0.5"), std::string::npos);
  const test::Diff d = test::diff(read_npy(dir / "lora.npy"), read_npy(dir / "plain.npy"));
  std::printf("the LoRAs change the image by up to %.3g\n", d.max_abs);
  EXPECT_GT(d.max_abs, 1e-2);

  const auto texts = read_png_text(dir / "lora.png");
  const auto m = parse_png_metadata(texts);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->prompts.size(), 1u);
  EXPECT_EQ(m->prompts[0], "a cat");  // as the pipeline ran it
  ASSERT_EQ(m->loras.size(), 2u);
  EXPECT_EQ(m->loras[0].name, "kohya");
  EXPECT_FLOAT_EQ(m->loras[0].strength, 0.5f);
  EXPECT_EQ(m->loras[1].name, "peft");
  EXPECT_FLOAT_EQ(m->loras[1].strength, -0.5f);
  EXPECT_EQ(m->loras[0].hash.size(), 12u);
  for (const auto& t : texts) {
    if (t.key != "parameters") continue;
    std::printf("parameters: %s\n", t.text.c_str());
    EXPECT_EQ(t.text.rfind("a cat <lora:kohya:0.5> <lora:peft:-0.5>\n", 0), 0u);
    EXPECT_NE(t.text.find(", Lora hashes: \"kohya: " + m->loras[0].hash + ", peft: " + m->loras[1].hash + "\""),
              std::string::npos);
  }
}

TEST(CliLora, ErrorsAreClear) {
  const fs::path dir = test::temp_dir("cli_lora_errors");
  CliRun unknown = cli({"--prompt", "x <lora:nope>", "--lora-dir", lora_dir().string()}, dir);
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("no 'nope.safetensors' in the LoRA folder"), std::string::npos) << unknown.err;
  CliRun no_dir = cli({"--prompt", "x <lora:kohya>"}, dir);
  EXPECT_NE(no_dir.code, 0);
  EXPECT_NE(no_dir.err.find("--lora-dir"), std::string::npos) << no_dir.err;
  CliRun bad = cli({"--prompt", "x", "--lora", (lora_dir() / "kohya.safetensors").string() + ":lots"}, dir);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("not a strength"), std::string::npos) << bad.err;
  CliRun checkpoint = cli({"--prompt", "x", "--lora", (test::tiny_sd_dir() / "vae" / "diffusion_pytorch_model.safetensors").string()}, dir);
  EXPECT_NE(checkpoint.code, 0);
  EXPECT_NE(checkpoint.err.find("not part of a LoRA"), std::string::npos) << checkpoint.err;
  EXPECT_FALSE(fs::exists(dir / "octodiff-3.png"));
}
