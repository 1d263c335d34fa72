// The plan cache's bounds (sharded_pipeline.h): at most kMaxCachedPlans compiled plans, the least
// recently used going first; with weights dropped after each phase (Minimal residency) no
// activation memory held by any plan between runs — after a completed run and after a cancelled
// one (an app session runs many signatures on one pipeline: before these bounds every signature
// kept its arenas' slabs, and the GUI soak's RSS climbed); with resident weights, the last run's
// plan alone keeps its slabs, within the budget, and reusing them changes no image.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "core/memory.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> load_tiny(WeightResidency residency) {
  ModelLoadOptions o;
  o.residency = residency;
  return StableDiffusionModel::load(test::tiny_sd_dir(), o);
}

std::shared_ptr<const StableDiffusionModel> tiny_model() {  // weights dropped after each phase
  static auto model = load_tiny(WeightResidency::Minimal);
  return model;
}

std::shared_ptr<const StableDiffusionModel> tiny_resident_model() {
  static auto model = load_tiny(WeightResidency::Resident);
  return model;
}

bool same_images(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::equal(a.data(), a.data() + a.numel(), b.data());
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
  EXPECT_TRUE(same_images(again.images, three_step_images));
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

TEST(PlanCache, ResidentWeightsKeepTheLastPlansActivationsAndReuseThem) {
  ShardedPipeline pipe(tiny_resident_model());
  ASSERT_TRUE(tiny_resident_model()->weights_stay_resident());
  const GenerationResult first = pipe.run(request_with_steps(3));
  const size_t kept = pipe.arena_bytes_reserved();
  EXPECT_GT(kept, 0u) << "the run's slabs stay for the next run";
  EXPECT_EQ(pipe.plans_holding_activations(), 1u);
  EXPECT_LE(static_cast<double>(kept), ShardedPipeline::kKeptActivationsFractionOfRam * physical_memory_bytes());

  // The same signature again runs in the slabs the first run left (written all over by it):
  // nothing more is taken, and no image changes (no stage reads memory it did not write).
  const GenerationResult again = pipe.run(request_with_steps(3));
  EXPECT_FALSE(again.compiled);
  EXPECT_EQ(pipe.arena_bytes_reserved(), kept);
  EXPECT_TRUE(same_images(again.images, first.images));

  // Another signature: the first plan lets its slabs go, only the new one holds activations.
  const GenerationResult other = pipe.run(request_with_steps(4));
  EXPECT_TRUE(other.compiled);
  EXPECT_EQ(pipe.plans_holding_activations(), 1u);
  EXPECT_TRUE(same_images(pipe.run(request_with_steps(3)).images, first.images));
  EXPECT_EQ(pipe.plans_holding_activations(), 1u);
  EXPECT_EQ(pipe.arena_bytes_reserved(), kept);
  std::printf("[plan cache] resident weights: %zu activation bytes kept by one plan between runs\n", kept);

  // A cancelled run leaves its plan's slabs for the next run, still one plan's.
  CancelToken cancel;
  int steps_seen = 0;
  auto progress = [&](const ProgressEvent& e) {
    if (e.phase == Phase::Denoise && ++steps_seen == 2) cancel.cancel();
  };
  EXPECT_THROW(pipe.run(request_with_steps(6), progress, {}, &cancel), Cancelled);
  EXPECT_EQ(pipe.plans_holding_activations(), 1u);
  EXPECT_TRUE(same_images(pipe.run(request_with_steps(3)).images, first.images));
}
