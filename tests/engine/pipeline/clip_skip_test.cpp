// Clip skip (GenerationRequest::clip_skip, A1111's "Clip skip"; diffusers' clip_skip is one less)
// against tests/data/tiny-sd-clip-skip (tools/goldens/make_clip_skip_goldens.py: diffusers 0.31's
// encode_prompt and StableDiffusionPipeline): the embeddings of both prompt paths with two text
// encoders, the whole pipeline, the text-encoding cache, the range and SDXL.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden_requests.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "pipeline/metadata.h"
#include "pipeline/model.h"
#include "pipeline/prompt_encoding.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<SafetensorsFile> goldens() {
  return SafetensorsFile::open(test::data_dir() / "tiny-sd-clip-skip" / "goldens.safetensors");
}

std::shared_ptr<const StableDiffusionModel> tiny_sd() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

ClipTextModel load_text_encoder(const fs::path& model_dir) {
  auto w = weights_from_safetensors({model_dir / "text_encoder" / "model.safetensors"}, "text_encoder");
  auto cfg = ClipTextConfig::from_json(read_text_file(model_dir / "text_encoder" / "config.json"), "config");
  return ClipTextModel::load(*w, cfg);
}

// The goldens' two prompts and their negative prompt, as the pipeline golden has them.
GenerationRequest golden_request() {
  GenerationRequest req = test::golden_prompts_request(test::golden_settings(test::tiny_sd_dir()));
  req.steps = 5;
  req.guidance_scale = 7.5;
  req.scheduler = SchedulerKind::Pndm;
  const Tensor init =
      SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "pipeline.safetensors")->to_f32("latents_init");
  req.latents = init.reshaped({2, 1, 4, 32, 32});
  return req;
}

// Device d's context [negative; prompt d] from the golden embeddings (rows: prompt 0, prompt 1, negative).
Tensor golden_context(const Tensor& embeds, int d) {
  const int64_t row = embeds.dim(1) * embeds.dim(2);
  Tensor out = Tensor::empty({2, embeds.dim(1), embeds.dim(2)});
  std::copy_n(embeds.data() + 2 * row, row, out.data());
  std::copy_n(embeds.data() + d * row, row, out.data() + row);
  return out;
}

}  // namespace

// Both prompt paths (token ids; A1111 layouts) and both text encoders (tiny-sd's final LayerNorm
// is the identity, tiny-sd-prompts' has a weight and a bias), every clip skip the goldens hold.
TEST(ClipSkip, EmbeddingsMatchDiffusersEncodePrompt) {
  const GenerationRequest req = golden_request();
  const std::vector<std::string> negatives(2, req.negative_prompts[0]);
  auto g = goldens();
  const ClipTokenizer& tok = tiny_sd()->tokenizer();
  for (const auto& [name, dir] : {std::pair<std::string, fs::path>{"tiny_sd", test::tiny_sd_dir()},
                                  {"prompts_te", test::data_dir() / "tiny-sd-prompts"}}) {
    const ClipTextModel encoder = load_text_encoder(dir);
    const std::vector<int64_t> ids = g->to_i64(name + ".ids");
    for (int skip : {1, 2, 3, 5}) {
      const Tensor expected = g->to_f32(name + ".skip" + std::to_string(skip) + ".embeds");
      for (PromptSyntax syntax : {PromptSyntax::Plain, PromptSyntax::A1111}) {
        PromptOptions options;
        options.syntax = syntax;
        options.skipped_layers = clip_skip_layers(skip, encoder.config());
        const TokenizedPrompts t = tokenize_prompts(tok, req.prompts, negatives, options);
        if (syntax == PromptSyntax::Plain) {  // the same ids as diffusers' tokenizer gave
          for (int i = 0; i < 3; ++i)
            for (int k = 0; k < 77; ++k) ASSERT_EQ((i < 2 ? t.cond[i] : t.uncond[0])[k], ids[i * 77 + k]);
        }
        for (int d = 0; d < 2; ++d) {
          const std::string label = name + " clip skip " + std::to_string(skip) +
                                    (syntax == PromptSyntax::Plain ? " ids" : " a1111") + " device " +
                                    std::to_string(d);
          test::expect_parity(label, encode_device_prompts(encoder, t, d, 1, true),
                              golden_context(expected, d));
        }
      }
    }
  }
}

// The pipeline (--compat diffusers, PNDM, 5 steps, guidance 7.5) at clip skip 2 against diffusers'
// StableDiffusionPipeline given encode_prompt's embeddings. The same pipeline ran clip skip 1 first,
// with its text-encoding cache on: the prompts' rows at the last layer must not be taken for them.
TEST(ClipSkip, PipelineMatchesDiffusersAndTheCacheKeepsSkipsApart) {
  auto g = goldens();
  ShardedPipeline pipe(tiny_sd());
  pipe.set_reuse_text_encodings(true);
  GenerationRequest req = golden_request();
  const GenerationResult last_layer = pipe.run(req);
  req.clip_skip = 2;
  const GenerationResult skipped = pipe.run(req);
  test::expect_parity("clip skip 2 final latents", skipped.final_latents.reshaped({2, 4, 32, 32}),
                      g->to_f32("pipeline_skip2.latents_final"));
  test::expect_close_abs("clip skip 2 images", skipped.images.reshaped({2, 64, 64, 3}),
                         g->to_f32("pipeline_skip2.images"), 1e-3);
  const test::Diff moved = test::diff(last_layer.images, skipped.images);
  std::printf("  clip skip 2 moves the images by %.3g against clip skip 1\n", moved.max_abs);
  EXPECT_GT(moved.max_abs, 1e-2);
}

TEST(ClipSkip, OutsideTheEncodersLayersIsAClearError) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req = golden_request();
  for (int skip : {0, -1, 6, 1000}) {
    req.clip_skip = skip;
    try {
      pipe.run(req);
      ADD_FAILURE() << "clip skip " << skip << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("clip skip " + std::to_string(skip) + " is outside 1..5"),
                std::string::npos)
          << e.what();
    }
  }
  req.clip_skip = 5;  // the first layer's output: allowed
  EXPECT_NO_THROW(pipe.run(req));
}

// SDXL takes its penultimate layers whatever the clip skip says (as A1111 does), and says so.
TEST(ClipSkip, SdxlKeepsItsPenultimateLayersWithAWarning) {
  auto sdxl = StableDiffusionModel::load(test::data_dir() / "tiny-sdxl");
  ShardedPipeline pipe(sdxl);
  GenerationRequest req;
  req.prompts = {"a red star"};
  req.steps = 2;
  const GenerationResult plain = pipe.run(req);
  req.clip_skip = 2;
  const GenerationResult skipped = pipe.run(req);
  EXPECT_EQ(test::diff(plain.images, skipped.images).max_abs, 0.0);
  const bool warned = std::any_of(skipped.warnings.begin(), skipped.warnings.end(), [](const std::string& w) {
    return w.find("clip skip 2 is not applied") != std::string::npos;
  });
  EXPECT_TRUE(warned);
  EXPECT_TRUE(plain.warnings.empty());
}

// The PNG says "Clip skip: N" (A1111's key, which A1111 reads back) and "clip_skip" in Octodiff's
// JSON when N is not 1, and both bring it back; without the key it is 1.
TEST(ClipSkip, MetadataCarriesItBothWays) {
  ShardedPipeline pipe(tiny_sd());
  GenerationRequest req;
  req.prompts = {"a red circle"};
  req.steps = 2;
  const ImageMetadata last_layer = describe_image(req, pipe.run(req), *tiny_sd(), 0, 0);
  EXPECT_EQ(a1111_parameters(last_layer).find("Clip skip"), std::string::npos);
  req.clip_skip = 3;
  const GenerationResult result = pipe.run(req);
  const ImageMetadata meta = describe_image(req, result, *tiny_sd(), 0, 0);
  const std::string text = a1111_parameters(meta);
  std::printf("[parameters] %s\n", text.c_str());
  EXPECT_NE(text.find(", Clip skip: 3"), std::string::npos);
  const auto back = parse_png_metadata(png_texts(meta));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->clip_skip, 3);
  const GenerationResult again = pipe.run(request_from_metadata(*back));
  EXPECT_EQ(test::diff(again.images, result.images).max_abs, 0.0);
  const auto from_text = parse_png_metadata({{"parameters", text}});
  ASSERT_TRUE(from_text.has_value());
  EXPECT_EQ(from_text->clip_skip, 3);
  const auto from_a1111 =
      parse_png_metadata({{"parameters", "a cat\nSteps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1, Size: 512x512, "
                                         "Model: anything-v3, Clip skip: 2, Version: v1.10.1"}});
  ASSERT_TRUE(from_a1111.has_value());
  EXPECT_EQ(request_from_metadata(*from_a1111).clip_skip, 2);
  const auto old = parse_png_metadata(png_texts(last_layer));
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->clip_skip, 1);
}
