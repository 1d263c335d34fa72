// A1111-style prompts: layouts and encodings against tests/data/tiny-sd-prompts (A1111's formula
// on transformers' CLIPTextModel computation, tools/goldens/make_prompt_goldens.py), embeddings'
// errors, padding of the rows of a batch, and pipeline runs with chunked prompts on tiny-sd.
#include "pipeline/prompt_chunks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path prompts_dir() { return test::data_dir() / "tiny-sd-prompts"; }

const ClipTokenizer& tokenizer() {
  static const ClipTokenizer tok = ClipTokenizer::from_folder(test::tiny_sd_dir() / "tokenizer");
  return tok;
}

const ClipTextModel& text_encoder() {
  static const ClipTextModel te = [] {
    // tiny-sd's text encoder with a final LayerNorm that has a bias (see the data's README).
    auto w = weights_from_safetensors({prompts_dir() / "text_encoder" / "model.safetensors"}, "text_encoder");
    auto cfg = ClipTextConfig::from_json(read_text_file(prompts_dir() / "text_encoder" / "config.json"), "config");
    return ClipTextModel::load(*w, cfg);
  }();
  return te;
}

std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(prompts_dir() / "goldens.safetensors"); }

std::string case_prompt(const std::string& name) {
  const auto prompts = nlohmann::json::parse(goldens()->metadata().at("prompts"));
  return prompts.at(name).get<std::string>();
}

const TextualInversionLibrary& library() {
  static const TextualInversionLibrary lib = read_textual_inversion_folder(prompts_dir() / "embeddings");
  return lib;
}

// Layout (ids, multipliers) exactly, then the encoding within the parity bar.
void check_case(const std::string& name, const EmbeddingVocabulary* vocabulary) {
  const auto g = goldens();
  PromptLayoutOptions options;
  options.syntax = PromptSyntax::A1111;
  options.embeddings = vocabulary;
  const PromptLayout layout = layout_prompt(tokenizer(), case_prompt(name), options);
  const auto ids = g->to_i64(name + ".ids");
  const Tensor multipliers = g->to_f32(name + ".multipliers");
  ASSERT_EQ(layout.chunks.size() * 77, ids.size()) << name;
  for (size_t c = 0; c < layout.chunks.size(); ++c)
    for (size_t t = 0; t < 77; ++t) {
      ASSERT_EQ(layout.chunks[c].ids[t], ids[c * 77 + t]) << name << " chunk " << c << " token " << t;
      ASSERT_EQ(layout.chunks[c].multipliers[t], multipliers.data()[c * 77 + t]) << name << " " << c << " " << t;
    }
  const PromptLayout empty = layout_prompt(tokenizer(), "", {});
  const Tensor z = encode_prompt_layouts(text_encoder(), {&layout}, empty);
  std::printf("[%s] %zu chunk(s), context %s\n", name.c_str(), layout.chunks.size(), shape_str(z.shape()).c_str());
  test::expect_parity("A1111 encoding '" + name + "'", z, g->to_f32(name + ".z"));
}

}  // namespace

TEST(PromptChunks, WeightedPromptMatchesA1111Formula) { check_case("weighted", nullptr); }

TEST(PromptChunks, BreakMakesTwoChunksOf77) { check_case("break", nullptr); }

TEST(PromptChunks, LongPromptChunksEvery75Tokens) { check_case("long", nullptr); }

TEST(PromptChunks, EmbeddingsInAllThreeLayouts) {
  ASSERT_EQ(library().entries.size(), 3u);
  for (const auto& e : library().entries) EXPECT_EQ(e.error, "") << e.embedding.name;
  const EmbeddingVocabulary vocabulary(library(), tokenizer(), 32);
  check_case("embeddings", &vocabulary);
  PromptLayoutOptions options{PromptSyntax::A1111, 0, &vocabulary};
  const PromptLayout layout = layout_prompt(tokenizer(), case_prompt("embeddings"), options);
  EXPECT_EQ(layout.embeddings_used, (std::vector<std::string>{"tiny-style", "cat-toy", "old-style"}));
  // Case-insensitive, as the tokenizer lower-cases the prompt.
  EXPECT_EQ(layout_prompt(tokenizer(), "TINY-Style", options).embeddings_used, std::vector<std::string>{"tiny-style"});
}

TEST(PromptChunks, EmbeddingOfAnotherWidthOrUnreadableIsAnErrorWhenUsed) {
  const fs::path dir = test::temp_dir("ti_errors");
  fs::copy_file(prompts_dir() / "embeddings" / "tiny-style.safetensors", dir / "tiny-style.safetensors");
  const std::string junk = "not a safetensors file";
  write_file_atomic(dir / "broken.safetensors", junk.data(), junk.size());
  const TextualInversionLibrary lib = read_textual_inversion_folder(dir);
  ASSERT_EQ(lib.entries.size(), 2u);
  EXPECT_NE(lib.entries[0].error, "");  // broken (sorted first)
  const EmbeddingVocabulary wide(lib, tokenizer(), 768);  // as if the encoder were SD 1.x's
  PromptLayoutOptions options{PromptSyntax::A1111, 0, &wide};
  try {
    layout_prompt(tokenizer(), "a tiny-style cat", options);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tiny-style.safetensors"), std::string::npos);
    EXPECT_NE(msg.find("width 32"), std::string::npos);
    EXPECT_NE(msg.find("width 768"), std::string::npos);
  }
  const EmbeddingVocabulary right(lib, tokenizer(), 32);
  options.embeddings = &right;
  EXPECT_NO_THROW(layout_prompt(tokenizer(), "a tiny-style cat", options));  // the broken file is not called
  try {
    layout_prompt(tokenizer(), "a broken cat", options);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("broken.safetensors"), std::string::npos);
  }
}

TEST(PromptChunks, RowsArePaddedWithTheEmptyPromptsEncoding) {
  PromptLayoutOptions options{PromptSyntax::A1111, 0, nullptr};
  const PromptLayout two = layout_prompt(tokenizer(), "a cat BREAK a dog", options);
  const PromptLayout one = layout_prompt(tokenizer(), "blurry", options);
  const PromptLayout empty = layout_prompt(tokenizer(), "", {});
  ASSERT_EQ(two.chunks.size(), 2u);
  const Tensor both = encode_prompt_layouts(text_encoder(), {&one, &two}, empty);
  ASSERT_EQ(both.shape(), (Shape{2, 154, 32}));
  const Tensor alone = encode_prompt_layouts(text_encoder(), {&one}, empty);
  const Tensor nothing = encode_prompt_layouts(text_encoder(), {&empty}, empty);
  const int64_t n = 77 * 32;
  test::expect_parity("padded row, its own chunk", Tensor::wrap({n}, const_cast<float*>(both.data()), nullptr),
                      alone.reshaped({n}), 1e-6);
  test::expect_parity("padded row, the padding chunk",
                      Tensor::wrap({n}, const_cast<float*>(both.data()) + n, nullptr), nothing.reshaped({n}), 1e-6);
}

TEST(PromptChunks, CommaBacktrackMovesTheWordsAfterTheLastComma) {
  std::string prompt;
  for (int i = 0; i < 72; ++i) prompt += "a ";
  prompt += ", red cat dog";  // comma at token 72; "red cat dog" would fill 73..75+
  const PromptLayout plain = layout_prompt(tokenizer(), prompt, {});
  const PromptLayout backtracked = layout_prompt(tokenizer(), prompt, {PromptSyntax::Plain, 20, nullptr});
  ASSERT_EQ(plain.chunks.size(), 2u);
  ASSERT_EQ(backtracked.chunks.size(), 2u);
  const int comma = tokenizer().tokenize(",")[0];
  EXPECT_EQ(backtracked.chunks[0].ids[73], comma);             // the chunk ends at the comma
  EXPECT_EQ(backtracked.chunks[0].ids[74], tokenizer().eos_id());  // then eos/padding
  EXPECT_NE(plain.chunks[0].ids[74], tokenizer().eos_id());
  const auto red = tokenizer().tokenize("red");
  EXPECT_EQ(backtracked.chunks[1].ids[1], red[0]);             // "red ..." opens the next chunk
}

TEST(PromptChunks, WeightsRestoreTheMean) {
  std::vector<float> z{1, 2, 3, 4, 5, 6};  // 3 tokens × 2
  const std::vector<float> w{1.0f, 2.0f, 0.5f};
  apply_weights_restoring_mean(z.data(), w, 2);
  const double mean = (z[0] + z[1] + z[2] + z[3] + z[4] + z[5]) / 6;
  EXPECT_NEAR(mean, 3.5, 1e-6);  // the original mean
  // z·w = {1,2,6,8,2.5,3} (mean 22.5/6 = 3.75), times 3.5/3.75
  EXPECT_NEAR(z[2], 6 * 3.5 / 3.75, 1e-5);
  EXPECT_NEAR(z[4], 2.5 * 3.5 / 3.75, 1e-5);
}
