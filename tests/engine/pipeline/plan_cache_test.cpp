// The plan cache's bounds (sharded_pipeline.h): at most kMaxCachedPlans compiled plans, the least
// recently used going first, and no activation memory held by any plan between runs — after a
// completed run and after a cancelled one. (An app session runs many signatures on one pipeline:
// before these bounds every signature kept its arenas' slabs, and the GUI soak's RSS climbed.)
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

// A one-prompt 32×32 request whose signature is told apart by its step count.
GenerationRequest request_with_steps(int steps) {
  GenerationRequest r;
  r.prompts = {"a red circle"};
  r.width = r.height = 32;
  r.steps = steps;
  r.seed = 3;
  return r;
}

}  // namespace

TEST(PlanCache, KeepsAtMostTheBoundEvictingTheLeastRecentlyUsed) {
  ShardedPipeline pipe(tiny_model());
  const int signatures = static_cast<int>(ShardedPipeline::kMaxCachedPlans) + 3;
  std::vector<Signature> seen;
  Tensor three_step_images;  // signature 1's first images
  for (int i = 0; i < signatures; ++i) {
    const GenerationResult result = pipe.run(request_with_steps(2 + i));
    EXPECT_TRUE(result.compiled);
    seen.push_back(result.signature);
    if (i == 1) {
      three_step_images = result.images;
      EXPECT_FALSE(pipe.run(request_with_steps(2)).compiled);  // signature 0 again: now used after 1
    }
    if (i == static_cast<int>(ShardedPipeline::kMaxCachedPlans)) {  // the first eviction: 1 (used last before 0)
      EXPECT_FALSE(pipe.is_compiled(seen[1]));
      EXPECT_TRUE(pipe.is_compiled(seen[0]));
    }
    EXPECT_LE(pipe.cached_plans(), ShardedPipeline::kMaxCachedPlans);
    EXPECT_EQ(pipe.arena_bytes_reserved(), 0u) << "after run " << i;
  }
  std::printf("[plan cache] %d signatures run, %zu plans kept (bound %zu)\n", signatures, pipe.cached_plans(),
              ShardedPipeline::kMaxCachedPlans);
  EXPECT_EQ(pipe.cached_plans(), ShardedPipeline::kMaxCachedPlans);
  // Three evictions, least recently used first: 1, then 0, then 2.
  for (int i : {0, 1, 2}) EXPECT_FALSE(pipe.is_compiled(seen[i])) << "signature " << i;
  for (int i = 3; i < signatures; ++i) EXPECT_TRUE(pipe.is_compiled(seen[i])) << "signature " << i;
  // An evicted signature compiles again and gives the same images as its first run.
  const GenerationResult again = pipe.run(request_with_steps(3));
  EXPECT_TRUE(again.compiled);
  ASSERT_EQ(again.images.numel(), three_step_images.numel());
  EXPECT_TRUE(std::equal(again.images.data(), again.images.data() + again.images.numel(), three_step_images.data()));
}

TEST(PlanCache, ACancelledRunLeavesNoActivationMemory) {
  ShardedPipeline pipe(tiny_model());
  CancelToken cancel;
  int steps_seen = 0;
  auto progress = [&](const ProgressEvent& e) {
    if (e.phase == Phase::Denoise && ++steps_seen == 2) cancel.cancel();
  };
  EXPECT_THROW(pipe.run(request_with_steps(6), progress, {}, &cancel), Cancelled);
  EXPECT_GE(steps_seen, 2);
  EXPECT_EQ(pipe.cached_plans(), 1u);
  EXPECT_EQ(pipe.arena_bytes_reserved(), 0u);
}
