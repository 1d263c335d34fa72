// SDXL prompts as A1111 reads them (pipeline/sdxl_prompt_chunks.h) on the tiny SDXL
// (tests/data/tiny-sdxl), against tests/data/tiny-sdxl-prompts (A1111's formula per tower on
// the towers' torch reference, and diffusers' StableDiffusionXLPipeline given those embeddings:
// tools/goldens/make_sdxl_prompt_goldens.py): both towers' layouts exactly, weighted and chunked
// conditioning (context 77k × 80, pooled) and SDXL textual inversions at the parity bar (1e-4 of
// scale, f32), whole runs, refusals of the other family's embeddings, and the SDXL options in PNG
// metadata reproducing the image.
#include <gtest/gtest.h>

#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/export.h"
#include "pipeline/metadata.h"
#include "pipeline/sdxl_prompt_chunks.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

fs::path sdxl_dir() { return test::data_dir() / "tiny-sdxl"; }
fs::path prompts_dir() { return test::data_dir() / "tiny-sdxl-prompts"; }
fs::path embeddings_dir() { return prompts_dir() / "embeddings"; }

std::shared_ptr<const StableDiffusionModel> tiny_sdxl() {
  static auto model = StableDiffusionModel::load(sdxl_dir());
  return model;
}

std::shared_ptr<SafetensorsFile> goldens() { return SafetensorsFile::open(prompts_dir() / "goldens.safetensors"); }
std::shared_ptr<SafetensorsFile> pipeline_golden() {
  return SafetensorsFile::open(prompts_dir() / "pipeline.safetensors");
}

std::string case_prompt(const std::string& name) {
  return nlohmann::json::parse(goldens()->metadata().at("prompts")).at(name).get<std::string>();
}

nlohmann::json pipeline_settings() { return nlohmann::json::parse(pipeline_golden()->metadata().at("settings")); }

const TextualInversionLibrary& library() {
  static const TextualInversionLibrary lib = read_textual_inversion_folder(embeddings_dir());
  return lib;
}

// A1111 syntax, chunks, the folder's SDXL embeddings: tokens of one prompt (no negative row).
SdxlTokenizedPrompts a1111_tokens(const std::string& prompt, LongPrompts long_prompts = LongPrompts::Chunk) {
  auto m = tiny_sdxl();
  static const EmbeddingVocabulary v1(library(), m->tokenizer(), m->text_encoder().config().hidden_size,
                                      EmbeddingTower::SdxlFirst);
  static const EmbeddingVocabulary v2(library(), m->tokenizer_2(), m->text_encoder_2().config().hidden_size,
                                      EmbeddingTower::SdxlSecond);
  SdxlPromptOptions options{PromptSyntax::A1111, long_prompts, 0, &v1, &v2};
  return tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {prompt}, {""}, false, options);
}

SdxlConditioning encode(const SdxlTokenizedPrompts& tokens) {
  auto m = tiny_sdxl();
  return encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), tokens, 0, 1, /*guidance=*/false,
                                    sdxl_time_ids({}, 32, 32));
}

void expect_layout(const PromptLayout& layout, const std::vector<int64_t>& ids, const Tensor& multipliers,
                   const std::string& what) {
  ASSERT_EQ(layout.chunks.size() * 77, ids.size()) << what;
  for (size_t c = 0; c < layout.chunks.size(); ++c)
    for (size_t t = 0; t < 77; ++t) {
      ASSERT_EQ(layout.chunks[c].ids[t], ids[c * 77 + t]) << what << " chunk " << c << " token " << t;
      ASSERT_EQ(layout.chunks[c].multipliers[t], multipliers.data()[c * 77 + t]) << what << " " << c << " " << t;
    }
}

void check_case(const std::string& name) {
  const auto g = goldens();
  const SdxlTokenizedPrompts tokens = a1111_tokens(case_prompt(name));
  ASSERT_TRUE(tokens.uses_layouts());
  const Tensor multipliers = g->to_f32(name + ".multipliers");
  expect_layout(tokens.tower_1.cond_layouts[0], g->to_i64(name + ".ids_1"), multipliers, name + " tokenizer 1");
  expect_layout(tokens.tower_2.cond_layouts[0], g->to_i64(name + ".ids_2"), multipliers, name + " tokenizer 2");
  const SdxlConditioning c = encode(tokens);
  std::printf("[%s] %zu chunk(s), context %s\n", name.c_str(), tokens.tower_1.cond_layouts[0].chunks.size(),
              shape_str(c.context.shape()).c_str());
  test::expect_parity("sdxl A1111 prompt_embeds '" + name + "'", c.context, g->to_f32(name + ".prompt_embeds"));
  test::expect_parity("sdxl A1111 pooled '" + name + "'", c.text_time.text_embeds, g->to_f32(name + ".pooled"));
}

// The error message of running `req`, or "" when it runs.
std::string run_error(ShardedPipeline& pipe, const GenerationRequest& req) {
  try {
    pipe.run(req);
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    return e.what();
  }
  return "";
}

void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data()[i], b.data()[i]) << what << ", element " << i;
}

}  // namespace

TEST(SdxlPromptChunks, WeightedPromptMatchesA1111PerTower) { check_case("weighted"); }

TEST(SdxlPromptChunks, BreakMakesTwoChunks) { check_case("break"); }

TEST(SdxlPromptChunks, LongPromptChunksEvery75Tokens) { check_case("long"); }

TEST(SdxlPromptChunks, SdxlEmbeddingsGiveClipLAndClipGToTheirTowers) {
  check_case("embeddings");
  const SdxlTokenizedPrompts tokens = a1111_tokens(case_prompt("embeddings"));
  EXPECT_EQ(tokens.embeddings_used, (std::vector<std::string>{"tiny-xl-style", "xl-mark"}));
}

TEST(SdxlPromptChunks, MarkupFreeA1111PromptIsBitIdenticalToPlain) {
  auto m = tiny_sdxl();
  const std::string prompt = "a photograph of an astronaut riding a horse";
  const SdxlConditioning plain = encode(tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {prompt}, {""}, false));
  const SdxlConditioning a1111 = encode(a1111_tokens(prompt, LongPrompts::Truncate));
  expect_identical(a1111.context, plain.context, "context");
  expect_identical(a1111.text_time.text_embeds, plain.text_time.text_embeds, "pooled");
}

TEST(SdxlPromptChunks, RowsArePaddedAndZeroNegativesSpanTheWholeContext) {
  auto m = tiny_sdxl();
  const std::string two_chunks = case_prompt("break");
  SdxlPromptOptions options{PromptSyntax::A1111, LongPrompts::Chunk, 0, nullptr, nullptr};
  // Negative "a cat" (1 chunk) is padded with the empty prompt's chunk to the prompt's 2.
  const SdxlTokenizedPrompts padded =
      tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {two_chunks}, {"a cat"}, true, options);
  const SdxlConditioning c = encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), padded, 0, 1, true,
                                                        sdxl_time_ids({}, 32, 32));
  ASSERT_EQ(c.context.shape(), (Shape{2, 154, 80}));
  const SdxlConditioning a_cat = encode(tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {"a cat"}, {""}, false));
  const SdxlConditioning empty = encode(tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {""}, {""}, false));
  const int64_t chunk = 77 * 80;
  auto part = [](const Tensor& t, int64_t offset, int64_t n) {  // (other batch sizes: not bit for bit)
    return Tensor::wrap({n}, const_cast<float*>(t.data()) + offset, nullptr);
  };
  test::expect_parity("padded negative, its own chunk", part(c.context, 0, chunk), a_cat.context.reshaped({chunk}),
                      1e-6);
  test::expect_parity("padded negative, the padding chunk", part(c.context, chunk, chunk),
                      empty.context.reshaped({chunk}), 1e-6);
  test::expect_parity("padded negative, pooled from its first chunk", part(c.text_time.text_embeds, 0, 40),
                      a_cat.text_time.text_embeds.reshaped({40}), 1e-6);
  // An empty negative under the zeros rule: zeros over all 154 tokens, and a zero pooled row.
  const SdxlTokenizedPrompts zeros =
      tokenize_sdxl_prompts(m->tokenizer(), m->tokenizer_2(), {two_chunks}, {""}, true, options);
  const SdxlConditioning z = encode_sdxl_device_prompts(m->text_encoder(), m->text_encoder_2(), zeros, 0, 1, true,
                                                        sdxl_time_ids({}, 32, 32));
  ASSERT_EQ(z.context.shape(), (Shape{2, 154, 80}));
  for (int64_t i = 0; i < 2 * chunk; ++i) ASSERT_EQ(z.context[i], 0.0f) << i;
  for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(z.text_time.text_embeds[i], 0.0f) << i;
  test::expect_parity("the prompt's row beside a zero negative", part(z.context, 2 * chunk, 2 * chunk),
                      part(c.context, 2 * chunk, 2 * chunk), 1e-6);
}

class SdxlPromptPipelineParity : public ::testing::TestWithParam<const char*> {};

TEST_P(SdxlPromptPipelineParity, MatchesDiffusersGivenTheA1111Embeddings) {
  const std::string name = GetParam();
  auto g = pipeline_golden();
  const nlohmann::json s = pipeline_settings();
  ShardedPipeline pipe(tiny_sdxl());
  GenerationRequest req;
  req.prompts = {s["prompt"].get<std::string>()};
  if (name == "cfg") req.negative_prompts = {s["negative_prompt"].get<std::string>()};
  req.prompt_syntax = PromptSyntax::A1111;
  req.long_prompts = LongPrompts::Chunk;
  req.embeddings_dir = embeddings_dir().string();
  req.steps = s["steps"].get<int>();
  req.guidance_scale = s["guidance"].get<double>();
  req.compat = Compat::Diffusers;
  req.latents = g->to_f32("latents_init").reshaped({1, 1, 4, 16, 16});
  const GenerationResult res = pipe.run(req);
  EXPECT_EQ(res.context_tokens, (std::vector<int>{154}));
  ASSERT_EQ(res.embeddings.size(), name == "cfg" ? 2u : 1u);
  EXPECT_EQ(res.embeddings[0].name, "tiny-xl-style");
  test::expect_parity("sdxl A1111 pipeline " + name + " final latents", res.final_latents.reshaped({1, 4, 16, 16}),
                      g->to_f32(name + ".latents"));
  test::expect_parity("sdxl A1111 pipeline " + name + " images", res.images.reshaped({1, 32, 32, 3}),
                      g->to_f32(name + ".images"));
}

INSTANTIATE_TEST_SUITE_P(Cases, SdxlPromptPipelineParity, ::testing::Values("cfg", "zero_negative"));

TEST(SdxlPromptPipeline, EmbeddingsOfTheOtherFamilyAreRefusedNamingTheFile) {
  const fs::path dir = test::temp_dir("sdxl_ti_families");
  fs::copy_file(test::data_dir() / "tiny-sd-prompts" / "embeddings" / "tiny-style.safetensors",
                dir / "tiny-style.safetensors");
  fs::copy_file(embeddings_dir() / "xl-mark.safetensors", dir / "xl-mark.safetensors");
  Tensor wide = Tensor::zeros({1, 1280});
  write_safetensors_f32(dir / "big-g.safetensors", {{"clip_l", Tensor::zeros({1, 32})}, {"clip_g", wide}});
  GenerationRequest req;
  req.steps = 1;
  req.prompt_syntax = PromptSyntax::A1111;
  req.embeddings_dir = dir.string();
  ShardedPipeline sdxl(tiny_sdxl());
  req.prompts = {"a photograph of tiny-style"};  // an SD 1.x embedding on SDXL
  std::string msg = run_error(sdxl, req);
  EXPECT_NE(msg.find("tiny-style.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SD 1.x/2.x embedding"), std::string::npos) << msg;
  req.prompts = {"a photograph of big-g"};  // SDXL layout, but clip_g of SDXL base's width
  msg = run_error(sdxl, req);
  EXPECT_NE(msg.find("big-g.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'clip_g' has width 1280"), std::string::npos) << msg;
  req.prompts = {"a photograph of xl-mark"};
  EXPECT_EQ(run_error(sdxl, req), "");
  ShardedPipeline sd(StableDiffusionModel::load(test::tiny_sd_dir()));  // an SDXL embedding on SD 1.x
  msg = run_error(sd, req);
  EXPECT_NE(msg.find("xl-mark.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is an SDXL embedding"), std::string::npos) << msg;
}

TEST(SdxlPromptPipeline, SizeOptionsAndPromptReadingRoundTripThroughThePng) {
  ShardedPipeline pipe(tiny_sdxl());
  GenerationRequest req;
  req.prompts = {"a photograph of tiny-xl-style BREAK (a horse:1.2)"};
  req.negative_prompts = {"[blurry]"};
  req.prompt_syntax = PromptSyntax::A1111;
  req.long_prompts = LongPrompts::Chunk;
  req.embeddings_dir = embeddings_dir().string();
  req.steps = 2;
  req.seed = 7;
  req.compat = Compat::Diffusers;
  req.sdxl_size = {48, 40, 4, 8, 32, 32};
  const GenerationResult res = pipe.run(req);
  const fs::path dir = test::temp_dir("sdxl_prompt_png");
  const auto paths = save_image_pngs(dir, req, res, *tiny_sdxl());
  ASSERT_EQ(paths.size(), 1u);
  const std::vector<PngText> texts = read_png_text(paths[0]);
  const auto meta = parse_png_metadata(texts);
  ASSERT_TRUE(meta.has_value());
  const std::string a1111 = a1111_parameters(*meta);
  std::printf("[parameters] %s\n", a1111.c_str());
  EXPECT_NE(a1111.find("Compat: diffusers, Original size: 40x48, Crop top: 4, Crop left: 8, Target size: 32x32"),
            std::string::npos);
  EXPECT_NE(a1111.find("Prompt syntax: a1111, Long prompts: chunk, TI hashes: \"tiny-xl-style: "), std::string::npos);
  GenerationRequest again = request_from_metadata(*meta);
  EXPECT_EQ(again.compat, Compat::Diffusers);
  EXPECT_EQ(again.sdxl_size.original_height, 48);
  EXPECT_EQ(again.sdxl_size.original_width, 40);
  EXPECT_EQ(again.sdxl_size.crop_top, 4);
  EXPECT_EQ(again.sdxl_size.crop_left, 8);
  EXPECT_EQ(again.sdxl_size.target_height, 32);
  EXPECT_EQ(again.sdxl_size.target_width, 32);
  again.embeddings_dir = req.embeddings_dir;  // not in the metadata: the app's folder setting
  expect_identical(pipe.run(again).images, res.images, "the image made again from its PNG");
  // The A1111 text alone carries them too.
  for (const PngText& t : texts)
    if (t.key == "parameters") {
      const auto from_text = parse_png_metadata({t});
      ASSERT_TRUE(from_text.has_value());
      const SdxlSizeConditioning z = request_from_metadata(*from_text).sdxl_size;
      EXPECT_EQ((std::array<int, 6>{z.original_height, z.original_width, z.crop_top, z.crop_left, z.target_height,
                                    z.target_width}),
                (std::array<int, 6>{48, 40, 4, 8, 32, 32}));
    }
  // Without size options nothing new is written.
  req.sdxl_size = {};
  const ImageMetadata plain = describe_image(req, pipe.run(req), *tiny_sdxl(), 0, 0);
  EXPECT_EQ(a1111_parameters(plain).find("Original size"), std::string::npos);
  EXPECT_EQ(metadata_json(plain).find("sdxl_size"), std::string::npos);
}
