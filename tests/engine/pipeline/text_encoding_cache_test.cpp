// The text-encoding cache (pipeline/text_encoding_cache.h): its premise — a row's encoding does
// not depend on the other rows of its batch, to the bit — on the tiny model's encoder; the cache's
// own bookkeeping (each distinct missing row encoded once, least recently used rows evicted); and
// pipelines reusing earlier prompts' encodings giving exactly the images of a pipeline that
// encodes every prompt afresh, plain and A1111 prompts (emphasis weights applied after the cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/isa.h"
#include "pipeline/sharded_pipeline.h"
#include "pipeline/text_encoding_cache.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

std::shared_ptr<const StableDiffusionModel> tiny_sdxl() {
  static auto model = StableDiffusionModel::load(test::data_dir() / "tiny-sdxl");
  return model;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

bool same_images(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && same_bits(a.data(), b.data(), a.numel());
}

// A tensor of `rows` rows of 1 × 2 whose values name the row index they were encoded for.
Tensor fake_rows(const std::vector<size_t>& rows, const std::vector<std::string>& keys) {
  Tensor t = Tensor::empty({static_cast<int64_t>(rows.size()), 1, 2});
  for (size_t j = 0; j < rows.size(); ++j) {
    t[2 * j] = static_cast<float>(keys[rows[j]][0]);
    t[2 * j + 1] = static_cast<float>(rows.size());
  }
  return t;
}

}  // namespace

void expect_rows_encode_alone_as_in_a_batch();

TEST(TextEncodingCache, RowsEncodeAloneAsInABatch) {
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) continue;
    const kernels::ScopedKernelIsa scoped(isa);
    SCOPED_TRACE(isa_name(isa));
    expect_rows_encode_alone_as_in_a_batch();
  }
}

void expect_rows_encode_alone_as_in_a_batch() {
  const auto model = tiny_model();
  const ClipTextModel& encoder = model->text_encoder();
  std::vector<int32_t> ids;
  const std::vector<std::string> prompts = {"a red circle", "", "a big green triangle on a white background"};
  for (const auto& p : prompts) {
    const auto enc = model->tokenizer().encode(p);
    ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
  }
  const int64_t L = model->tokenizer().max_length(), n = static_cast<int64_t>(prompts.size());
  const Tensor batch = encoder.forward(ids, n, L).last_hidden_state;
  const int64_t row = batch.numel() / n;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t> one(ids.begin() + i * L, ids.begin() + (i + 1) * L);
    const Tensor alone = encoder.forward(one, 1, L).last_hidden_state;
    EXPECT_TRUE(same_bits(alone.data(), batch.data() + i * row, row)) << "row " << i << ": '" << prompts[i] << "'";
    const Tensor embedded = encoder.forward_embeddings(encoder.embed_tokens(one, 1, L)).last_hidden_state;
    EXPECT_TRUE(same_bits(embedded.data(), alone.data(), row)) << "row " << i << " through forward_embeddings";
  }
  // SDXL's second tower: hidden_states[-2] and the projected EOS state, row by row.
  const auto xl = tiny_sdxl();
  std::vector<int32_t> ids_2;
  for (const auto& p : prompts) {
    const auto enc = xl->tokenizer_2().encode(p);
    ids_2.insert(ids_2.end(), enc.ids.begin(), enc.ids.end());
  }
  const int64_t L2 = xl->tokenizer_2().max_length();
  const ClipTextProjectionOutput all = xl->text_encoder_2().forward(ids_2, n, L2);
  const int64_t hidden = all.penultimate.numel() / n, P = all.text_embeds.numel() / n;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t> one(ids_2.begin() + i * L2, ids_2.begin() + (i + 1) * L2);
    const ClipTextProjectionOutput alone = xl->text_encoder_2().forward(one, 1, L2);
    EXPECT_TRUE(same_bits(alone.penultimate.data(), all.penultimate.data() + i * hidden, hidden)) << "SDXL row " << i;
    EXPECT_TRUE(same_bits(alone.text_embeds.data(), all.text_embeds.data() + i * P, P)) << "SDXL text_embeds " << i;
  }
}

TEST(TextEncodingCache, EncodesEachMissingRowOnceAndEvictsTheLeastRecentlyUsed) {
  TextEncodingCache cache(3);
  std::vector<std::vector<size_t>> calls;
  auto rows = [&](const std::vector<std::string>& keys) {
    return cache.rows(keys, [&](const std::vector<size_t>& which) {
      calls.push_back(which);
      return fake_rows(which, keys);
    });
  };
  const Tensor first = rows({"a", "b", "a", "c"});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<size_t>{0, 1, 3}));  // "a" once
  ASSERT_EQ(first.dim(0), 4);
  EXPECT_EQ(first[0], 'a');
  EXPECT_EQ(first[2], 'b');
  EXPECT_EQ(first[4], 'a');
  EXPECT_EQ(first[6], 'c');
  EXPECT_EQ(cache.misses(), 3u);
  EXPECT_EQ(cache.hits(), 0u);

  const Tensor second = rows({"c", "a", "d"});  // "d" evicts "b", the least recently used
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], (std::vector<size_t>{2}));
  EXPECT_EQ(second[0], 'c');
  EXPECT_EQ(second[1], 3.0f);  // from the first call's batch of 3
  EXPECT_EQ(second[2], 'a');
  EXPECT_EQ(second[4], 'd');
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_EQ(cache.size(), 3u);

  rows({"b"});
  ASSERT_EQ(calls.size(), 3u) << "'b' should have been evicted";
  rows({"a", "d"});
  EXPECT_EQ(calls.size(), 3u) << "'a' and 'd' are still held";

  TextEncodingCache none(0);  // capacity 0 holds nothing
  int encodes = 0;
  for (int i = 0; i < 2; ++i)
    none.rows({"x"}, [&](const std::vector<size_t>& which) {
      ++encodes;
      return fake_rows(which, {"x"});
    });
  EXPECT_EQ(encodes, 2);
}

TEST(TextEncodingCache, ABadEncodingIsAnErrorAndHoldsNothing) {
  TextEncodingCache cache;
  try {
    cache.rows({"a", "b"}, [](const std::vector<size_t>&) { return Tensor::empty({1, 1, 2}); });
    FAIL() << "a batch of the wrong size was taken";
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
  }
  EXPECT_EQ(cache.size(), 0u);
}

namespace {

GenerationRequest request(std::vector<std::string> prompts, uint64_t seed, PromptSyntax syntax) {
  GenerationRequest r;
  r.prompts = std::move(prompts);
  r.negative_prompts = {"blurry"};
  r.width = r.height = 32;
  r.steps = 2;
  r.seed = seed;
  r.prompt_syntax = syntax;
  return r;
}

}  // namespace

// Later runs take the rows earlier runs encoded (the negative prompt, a prompt seen before, the
// same prompt on two devices) and give the very images of a pipeline that encodes everything,
// also after the plans whose arenas the encoding ran in are gone.
TEST(TextEncodingCache, PipelinesReusingEncodingsMakeTheSameImages) {
  for (const bool xl : {false, true}) {
    for (PromptSyntax syntax : {PromptSyntax::Plain, PromptSyntax::A1111}) {
      const bool a1111 = syntax == PromptSyntax::A1111;
      const auto model = xl ? tiny_sdxl() : tiny_model();
      SCOPED_TRACE(xl ? "SDXL" : "SD");
      ShardedPipeline reusing(model), afresh(model);
      afresh.set_reuse_text_encodings(false);
      const std::vector<GenerationRequest> runs = {
          request({"a red circle"}, 1, syntax),
          request({"a red circle"}, 2, syntax),  // the next seed: nothing to encode
          request({a1111 ? "(a red circle:1.4)" : "a red circle", "a blue square"}, 3, syntax),
          request({"a blue square", "a blue square"}, 4, syntax),
      };
      size_t hits_before = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        const GenerationResult got = reusing.run(runs[i]), want = afresh.run(runs[i]);
        // The plans (and their arenas, the runs' allocators) go; the held rows must not go with them.
        reusing.clear_plans();
        EXPECT_TRUE(same_images(got.images, want.images)) << (a1111 ? "A1111" : "plain") << " run " << i;
        const size_t hits = reusing.text_encodings().hits() - hits_before;
        hits_before = reusing.text_encodings().hits();
        std::printf("[text cache %s %s] run %zu: %zu rows from the cache\n", xl ? "SDXL" : "SD",
                    a1111 ? "A1111" : "plain", i, hits);
        if (i > 0) {
          EXPECT_GE(hits, 2u) << "run " << i << " should reuse the negative prompt and a prompt";
        }
      }
      EXPECT_EQ(afresh.text_encodings().hits() + afresh.text_encodings().misses(), 0u);
    }
  }
}

// encode_prompts (the app's live mode, before a run) fills the cache with the rows a run of the
// same request then takes — every one of them, nothing encoded again — and that run's images are
// those of a pipeline that encodes everything itself; with reuse off it encodes nothing; a bad
// request is the run's error.
TEST(TextEncodingCache, EncodingPromptsAheadLeavesTheRunNothingToEncode) {
  for (const bool xl : {false, true}) {
    SCOPED_TRACE(xl ? "SDXL" : "SD");
    const auto model = xl ? tiny_sdxl() : tiny_model();
    ShardedPipeline ahead(model), afresh(model);
    afresh.set_reuse_text_encodings(false);
    const GenerationRequest req = request({"a red circle", "a blue square"}, 9, PromptSyntax::Plain);
    EXPECT_GE(ahead.encode_prompts(req), 0.0);
    // Two prompts and the negative prompt (the two devices may both encode the latter at once).
    const size_t encoded = ahead.text_encodings().misses(), hits_ahead = ahead.text_encodings().hits();
    EXPECT_GE(encoded, 3u);
    EXPECT_LE(encoded, 4u);
    const GenerationResult got = ahead.run(req), want = afresh.run(req);
    EXPECT_EQ(ahead.text_encodings().misses(), encoded) << "the run encoded a row again";
    const size_t taken = ahead.text_encodings().hits() - hits_ahead;
    EXPECT_EQ(taken, 4u) << "each device's prompt and negative prompt from the cache";
    EXPECT_TRUE(same_images(got.images, want.images));
    std::printf("[encode ahead %s] %zu rows encoded ahead, %zu taken by the run\n", xl ? "SDXL" : "SD",
                encoded, taken);

    EXPECT_EQ(afresh.encode_prompts(req), 0.0);
    EXPECT_EQ(afresh.text_encodings().misses(), 0u);
    GenerationRequest bad = req;
    bad.width = 33;
    EXPECT_THROW(ahead.encode_prompts(bad), Error);
  }
}
