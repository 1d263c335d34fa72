// Pipeline runs with A1111-style prompts on tiny-sd: a chunked prompt makes a 154-token context
// and runs end to end; markup-free prompts read as a1111 give the plain images bit for bit; the
// negative prompt is padded to the prompt's chunks (and the reverse); embeddings by name; the
// options reach the metadata and come back from it.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

GenerationRequest request(const std::string& prompt, const std::string& negative = "blurry") {
  GenerationRequest r;
  r.prompts = {prompt};
  r.negative_prompts = {negative};
  r.steps = 2;
  r.seed = 3;
  return r;
}

void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data()[i], b.data()[i]) << what << ", element " << i;
}

}  // namespace

TEST(LongPrompts, ChunkedPromptRunsWithA154TokenContext) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest r = request("a (red:1.3) circle on a white table BREAK a [blue] square in the sky");
  r.prompt_syntax = PromptSyntax::A1111;
  r.long_prompts = LongPrompts::Chunk;
  const GenerationResult chunked = pipe.run(r);
  EXPECT_EQ(chunked.context_tokens, std::vector<int>{154});
  EXPECT_TRUE(chunked.warnings.empty());
  for (float v : chunked.images) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  r.long_prompts = LongPrompts::Truncate;  // the same prompt in one window: a warning, 77 tokens
  const GenerationResult truncated = pipe.run(r);
  EXPECT_EQ(truncated.context_tokens, std::vector<int>{77});
  ASSERT_EQ(truncated.warnings.size(), 1u);
  std::printf("[warning] %s\n", truncated.warnings[0].c_str());
  EXPECT_NE(truncated.warnings[0].find("prompt 1 has 2 chunks"), std::string::npos);
  const test::Diff d = test::diff(chunked.images, truncated.images);
  std::printf("[long prompts] chunked vs truncated images differ by max %.3e\n", d.max_abs);
  EXPECT_GT(d.max_abs, 0.0);  // the second chunk reaches the UNet
}

TEST(LongPrompts, NegativePromptIsPaddedToThePromptsChunksAndTheReverse) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest r = request("a red circle", "blurry BREAK low quality BREAK watermark");
  r.prompt_syntax = PromptSyntax::A1111;
  r.long_prompts = LongPrompts::Chunk;
  r.prompts = {"a red circle", "a blue square"};
  r.batch_per_device = 2;
  EXPECT_EQ(pipe.run(r).context_tokens, std::vector<int>{231});
  r.negative_prompts = {"blurry"};
  r.prompts = {"a red circle BREAK on a table", "a blue square"};
  EXPECT_EQ(pipe.run(r).context_tokens, std::vector<int>{154});
}

TEST(LongPrompts, MarkupFreePromptsReadAsA1111AreBitIdenticalToPlain) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest r = request("a red circle on a white table");
  const GenerationResult plain = pipe.run(r);
  r.prompt_syntax = PromptSyntax::A1111;
  expect_identical(pipe.run(r).images, plain.images, "a1111, truncate");
  r.long_prompts = LongPrompts::Chunk;
  const GenerationResult chunk = pipe.run(r);
  EXPECT_EQ(chunk.context_tokens, std::vector<int>{77});
  expect_identical(chunk.images, plain.images, "a1111, chunk");
}

TEST(LongPrompts, EmbeddingsByNameAndOptionsInTheMetadata) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest r = request("a photograph of tiny-style riding a (horse:1.2)", "cat-toy");
  r.prompt_syntax = PromptSyntax::A1111;
  r.long_prompts = LongPrompts::Chunk;
  r.comma_backtrack = 20;
  r.embeddings_dir = (test::data_dir() / "tiny-sd-prompts" / "embeddings").string();
  const GenerationResult result = pipe.run(r);
  ASSERT_EQ(result.embeddings.size(), 2u);
  EXPECT_EQ(result.embeddings[0].name, "tiny-style");
  EXPECT_EQ(result.embeddings[1].name, "cat-toy");
  GenerationRequest without = r;
  without.embeddings_dir.clear();  // the names are then plain words
  EXPECT_GT(test::diff(pipe.run(without).images, result.images).max_abs, 0.0);

  const ImageMetadata meta = describe_image(r, result, *tiny_model(), 0, 0);
  const std::string a1111 = a1111_parameters(meta);
  std::printf("[parameters] %s\n", a1111.c_str());
  EXPECT_NE(a1111.find("Prompt syntax: a1111, Long prompts: chunk, Comma backtrack: 20, TI hashes: \"tiny-style: "),
            std::string::npos);
  const auto back = parse_png_metadata(png_texts(meta));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->embeddings.size(), 2u);
  EXPECT_EQ(back->embeddings[0].hash.size(), 12u);
  const GenerationRequest again = request_from_metadata(*back);
  EXPECT_EQ(again.prompt_syntax, PromptSyntax::A1111);
  EXPECT_EQ(again.long_prompts, LongPrompts::Chunk);
  EXPECT_EQ(again.comma_backtrack, 20);
  // The A1111 text alone: Octodiff's keys are read back; A1111's own text (no "Compat") means
  // A1111's reading.
  const auto from_text = parse_png_metadata({{"parameters", a1111}});
  ASSERT_TRUE(from_text.has_value());
  EXPECT_EQ(from_text->prompt_syntax, PromptSyntax::A1111);
  EXPECT_EQ(from_text->comma_backtrack, 20);
  const auto from_a1111 = parse_png_metadata({{"parameters", "a cat\nSteps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1, Size: 512x512"}});
  ASSERT_TRUE(from_a1111.has_value());
  EXPECT_EQ(from_a1111->prompt_syntax, PromptSyntax::A1111);
  EXPECT_EQ(from_a1111->long_prompts, LongPrompts::Chunk);
}

TEST(LongPrompts, PlainMetadataHasNoNewKeysAndOldMetadataReadsPlain) {
  ShardedPipeline pipe(tiny_model());
  const GenerationRequest r = request("a red circle");
  const GenerationResult result = pipe.run(r);
  const ImageMetadata meta = describe_image(r, result, *tiny_model(), 0, 0);
  EXPECT_EQ(a1111_parameters(meta).find("Prompt syntax"), std::string::npos);
  const auto back = parse_png_metadata(png_texts(meta));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->prompt_syntax, PromptSyntax::Plain);
  EXPECT_EQ(back->long_prompts, LongPrompts::Truncate);
}

TEST(LongPrompts, ClearErrors) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest r = request("a cat");
  r.embeddings_dir = (test::data_dir() / "no-such-folder").string();
  try {
    pipe.run(r);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("no-such-folder"), std::string::npos);
  }
  r.embeddings_dir.clear();
  r.prompt_syntax = PromptSyntax::A1111;
  r.prompts = {"a (cat:1.2.3)"};
  try {
    pipe.run(r);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_EQ(std::string(e.what()).rfind("prompt 1: ", 0), 0u);
  }
}
