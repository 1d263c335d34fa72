// octodiff-cli's prompt options: --prompt-syntax, --long-prompts, --comma-backtrack, --embeddings,
// --clip-skip
// on the tiny model (the context length in --json, the options in the PNG's metadata, errors).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/files.h"
#include "io/png.h"
#include "pipeline/metadata.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

CliRun cli(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), {"--steps", "2", "--seed", "3"});
  return test::run_cli(test::tiny_generate(std::move(args)), cwd);
}

}  // namespace

TEST(CliPrompts, ChunkedA1111PromptWithEmbeddingsAndTheMetadataSaysSo) {
  const fs::path dir = test::temp_dir("cli_prompts");
  const std::string embeddings = (test::data_dir() / "tiny-sd-prompts" / "embeddings").string();
  CliRun r = cli({"--prompt", "a (red:1.2) tiny-style circle BREAK on a [white] table", "--negative-prompt", "cat-toy",
                  "--prompt-syntax", "a1111", "--long-prompts", "chunk", "--embeddings", embeddings, "--json",
                  "--out", "chunked.png"},
                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["settings"]["prompt_syntax"], "a1111");
  EXPECT_EQ(j["settings"]["long_prompts"], "chunk");
  EXPECT_EQ(j["settings"]["context_tokens"], nlohmann::json::array({154}));
  const auto m = parse_png_metadata(read_png_text(dir / "chunked.png"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->prompt_syntax, PromptSyntax::A1111);
  EXPECT_EQ(m->long_prompts, LongPrompts::Chunk);
  ASSERT_EQ(m->embeddings.size(), 2u);
  EXPECT_EQ(m->embeddings[0].name, "tiny-style");
  EXPECT_EQ(m->embeddings[1].name, "cat-toy");
}

TEST(CliPrompts, ErrorsAreClear) {
  const fs::path dir = test::temp_dir("cli_prompts_errors");
  CliRun r = cli({"--prompt", "a cat", "--prompt-syntax", "comfy"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown prompt syntax 'comfy'"), std::string::npos) << r.err;
  r = cli({"--prompt", "a cat", "--long-prompts", "wrap"}, dir);
  EXPECT_NE(r.err.find("unknown long-prompt rule 'wrap'"), std::string::npos) << r.err;
  r = cli({"--prompt", "a cat", "--embeddings", (dir / "missing").string()}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("embeddings folder"), std::string::npos) << r.err;
  std::printf("%s", r.err.c_str());
}

// --clip-skip: in --json, in the PNG (A1111's "Clip skip"), another image than the last layer's;
// out of range for the CLI or for the tiny model's 5-layer text encoder: a clear error.
TEST(CliPrompts, ClipSkipChangesTheImageAndTheMetadataSaysSo) {
  const fs::path dir = test::temp_dir("cli_clip_skip");
  CliRun r = cli({"--prompt", "a red circle", "--clip-skip", "2", "--json", "--out", "skip2.png", "--save-array",
                  "skip2.npy"},
                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["settings"]["clip_skip"], 2);
  const auto m = parse_png_metadata(read_png_text(dir / "skip2.png"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->clip_skip, 2);
  r = cli({"--prompt", "a red circle", "--out", "skip1.png", "--save-array", "skip1.npy"}, dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_text_file(dir / "skip1.npy"), read_text_file(dir / "skip2.npy"));
  r = cli({"--prompt", "a red circle", "--clip-skip", "0"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--clip-skip must be between 1 and 48, got 0"), std::string::npos) << r.err;
  r = cli({"--prompt", "a red circle", "--clip-skip", "6"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("clip skip 6 is outside 1..5"), std::string::npos) << r.err;
  std::printf("%s", r.err.c_str());
}

// `metadata` on another tool's image lists what a run of its settings here differs in.
TEST(CliPrompts, MetadataSaysWhatAnA1111ImageCannotHaveHere) {
  const fs::path dir = test::temp_dir("cli_metadata_a1111");
  write_png(dir / "a1111.png", Image8{4, 4, std::vector<uint8_t>(48, 200)},
            {{"parameters",
              "a castle\nSteps: 20, Sampler: Euler a Karras, CFG scale: 7, Seed: 1, Size: 512x512, "
              "Clip skip: 2"}});
  const CliRun r = test::run_cli({"metadata", (dir / "a1111.png").string()}, dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("[not applied here]\n- the seed draws JAX's noise here"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- the sampler 'Euler a Karras' runs as 'Euler a'"), std::string::npos) << r.out;
}
