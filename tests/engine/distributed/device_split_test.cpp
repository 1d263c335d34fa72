// One run's devices split into runs of fewer devices (what each MPI rank computes) and joined
// again: bit-identical to the whole run, on the tiny model, in one process.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "distributed/device_split.h"
#include "distributed/result_wire.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

GenerationRequest eight_prompts() {
  GenerationRequest req;
  for (int i = 0; i < 8; ++i) req.prompts.push_back("shape " + std::to_string(i));
  req.seed = 42;
  req.steps = 2;
  req.threads = 1;
  return req;
}

bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

GenerationResult run_in_parts(ShardedPipeline& pipe, const GenerationRequest& req, int parts) {
  const ResolvedRequest whole = pipe.resolve(req);
  std::vector<GenerationResult> results;
  for (const DeviceRange& range : split_devices(whole.signature.devices, parts))
    if (range.size()) results.push_back(pipe.run(device_subset_request(whole, range)));
  return join_device_results(whole, results);
}

}  // namespace

TEST(DeviceSplit, RangesAreContiguousBalancedAndCoverEveryDevice) {
  const auto r = split_devices(8, 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[0].end, 3);
  EXPECT_EQ(r[1].begin, 3);
  EXPECT_EQ(r[1].end, 6);
  EXPECT_EQ(r[2].begin, 6);
  EXPECT_EQ(r[2].end, 8);
  const auto more = split_devices(2, 4);  // more parts than devices: the last ones empty
  EXPECT_EQ(more[0].size() + more[1].size(), 2);
  EXPECT_EQ(more[2].size(), 0);
  EXPECT_EQ(more[3].size(), 0);
  EXPECT_THROW(split_devices(8, 0), Error);
}

TEST(DeviceSplit, ThreeRunsOfPartsJoinToTheWholeRunBitForBit) {
  ShardedPipeline pipe(tiny_model());
  const GenerationRequest req = eight_prompts();
  const GenerationResult whole = pipe.run(req);
  for (int parts : {2, 3}) {
    const GenerationResult joined = run_in_parts(pipe, req, parts);
    EXPECT_TRUE(bytes_equal(joined.images, whole.images)) << parts << " parts";
    EXPECT_TRUE(bytes_equal(joined.initial_latents, whole.initial_latents)) << parts << " parts";
    EXPECT_TRUE(bytes_equal(joined.final_latents, whole.final_latents)) << parts << " parts";
    EXPECT_EQ(joined.device_keys, whole.device_keys);
    EXPECT_EQ(joined.prompts, whole.prompts);
    EXPECT_EQ(joined.signature, whole.signature);
    EXPECT_EQ(joined.context_tokens, whole.context_tokens);
  }
}

TEST(DeviceSplit, InjectedLatentsAndBatchesAreSlicedPerDevice) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest req = eight_prompts();
  req.prompts.resize(6);
  req.batch_per_device = 2;  // 3 devices × 2 images
  const ResolvedRequest r = pipe.resolve(req);
  Tensor latents = Tensor::empty({3, 2, r.latent_channels, r.latent_height, r.latent_width});
  for (int64_t i = 0; i < latents.numel(); ++i) latents.data()[i] = static_cast<float>((i * 7919) % 1000) / 500.f - 1.f;
  req.latents = latents;
  const GenerationResult whole = pipe.run(req);
  const GenerationResult joined = run_in_parts(pipe, req, 2);
  EXPECT_TRUE(bytes_equal(joined.images, whole.images));
  EXPECT_TRUE(bytes_equal(joined.initial_latents, latents));
  EXPECT_EQ(joined.prompts, whole.prompts);
}

TEST(DeviceSplit, ARangeOutsideTheRunIsRefused) {
  ShardedPipeline pipe(tiny_model());
  const ResolvedRequest whole = pipe.resolve(eight_prompts());
  EXPECT_THROW(device_subset_request(whole, {6, 9}), Error);
  EXPECT_THROW(device_subset_request(whole, {3, 3}), Error);
}

TEST(ResultWire, AResultSurvivesItsHeaderAndTensors) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest req = eight_prompts();
  req.prompts.resize(2);
  GenerationResult r = pipe.run(req);
  r.nsfw_flagged = {true, false};  // the safety checker's verdicts travel with the images
  const std::string header = result_header_json(r);
  const ResultShapes shapes = result_header_shapes(header);
  EXPECT_EQ(shapes.images, r.images.shape());
  const GenerationResult back = result_from_header(header, r.images.clone(), r.initial_latents.clone(),
                                                   r.final_latents.clone());
  EXPECT_TRUE(bytes_equal(back.images, r.images));
  EXPECT_EQ(back.signature, r.signature);
  EXPECT_EQ(back.device_keys, r.device_keys);
  EXPECT_EQ(back.prompts, r.prompts);
  EXPECT_EQ(back.nsfw_flagged, r.nsfw_flagged);
  EXPECT_EQ(back.timings.step, r.timings.step);
  // Tensors that do not match the header are refused, naming which.
  try {
    result_from_header(header, r.images.slice0(0, 1).clone(), r.initial_latents, r.final_latents);
    FAIL() << "a wrong images shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("images"), std::string::npos) << e.what();
  }
}

// The safety checker's per-image verdicts of the parts join in device order, like the images.
TEST(DeviceSplit, SafetyVerdictsJoinInDeviceOrder) {
  ShardedPipeline pipe(tiny_model());
  GenerationRequest req = eight_prompts();
  req.prompts.resize(3);
  const ResolvedRequest whole = pipe.resolve(req);
  std::vector<GenerationResult> parts;
  for (const DeviceRange& range : split_devices(whole.signature.devices, 2))
    parts.push_back(pipe.run(device_subset_request(whole, range)));
  ASSERT_EQ(parts.size(), 2u);
  parts[0].nsfw_flagged.assign(parts[0].signature.devices, false);
  parts[0].nsfw_flagged.back() = true;
  parts[1].nsfw_flagged.assign(parts[1].signature.devices, true);
  std::vector<bool> expected = parts[0].nsfw_flagged;
  expected.insert(expected.end(), parts[1].nsfw_flagged.begin(), parts[1].nsfw_flagged.end());
  EXPECT_EQ(join_device_results(whole, parts).nsfw_flagged, expected);
}
