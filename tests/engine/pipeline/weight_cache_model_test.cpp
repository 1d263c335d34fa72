// Models through the weight cache: the second load maps what the first packed and gives the same
// bits; dropping a component's pages between uses changes nothing; a cache that does not fit is
// rebuilt and a cache that cannot be written only costs memory, never the load.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "io/files.h"
#include "io/weight_cache.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

ModelLoadOptions cached(const fs::path& dir, ComputeDType dtype = ComputeDType::F32) {
  ModelLoadOptions o;
  o.weight_cache_dir = dir;
  o.dtype = dtype;
  o.residency = WeightResidency::Minimal;  // these tests drop pages and read them back
  return o;
}

GenerationRequest request(ComputeDType dtype) {
  GenerationRequest r;
  r.prompts = {"a red circle", "a blue square"};
  r.steps = 2;
  r.seed = 3;
  r.dtype = dtype;
  return r;
}

void expect_same_images(const GenerationResult& a, const GenerationResult& b, const std::string& what) {
  ASSERT_EQ(a.images.shape(), b.images.shape());
  const test::Diff d = test::diff(a.images, b.images);
  std::printf("[weight cache] %s: max abs difference %.3g\n", what.c_str(), d.max_abs);
  EXPECT_EQ(d.max_abs, 0.0) << what;
}

}  // namespace

TEST(WeightCacheModel, CachedLoadGivesTheSameBits) {
  for (ComputeDType dtype : {ComputeDType::F32, ComputeDType::BF16}) {
    const fs::path dir = test::temp_dir("weight_cache_model_" + dtype_display_name(dtype));
    ModelLoadOptions heap;
    heap.weight_cache = false;
    heap.dtype = dtype;
    auto reference = ShardedPipeline(StableDiffusionModel::load(test::tiny_sd_dir(), heap)).run(request(dtype));

    const uint64_t read_aheads_before_packing = MappedFile::read_aheads_started();
    auto first = StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir, dtype));
    EXPECT_FALSE(first->loaded_from_cache(ModelComponent::UNet));
    // Packing reads each component's checkpoint ahead (io/files.h): three files here.
    EXPECT_EQ(MappedFile::read_aheads_started() - read_aheads_before_packing, 3u);
    first->wait_for_weight_caches();  // written in the background
    for (const std::string& note : first->load_notes())  // nothing to report but a bf16 VAE run in f32
      EXPECT_NE(note.find("the VAE computes in f32"), std::string::npos) << note;
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".octw";
    EXPECT_EQ(files, 3);  // text encoder, UNet, VAE
    expect_same_images(ShardedPipeline(first).run(request(dtype)), reference, "packed into the cache");

    const uint64_t read_aheads_before_cached_load = MappedFile::read_aheads_started();
    auto second = StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir, dtype));
    for (auto c : {ModelComponent::TextEncoder, ModelComponent::UNet, ModelComponent::Vae})
      EXPECT_TRUE(second->loaded_from_cache(c));
    // Served from the cache: the few small tensors it still reads pull no checkpoint in.
    EXPECT_EQ(MappedFile::read_aheads_started(), read_aheads_before_cached_load);
    ShardedPipeline pipe(second);
    expect_same_images(pipe.run(request(dtype)), reference, "mapped from the cache");
    second->release(ModelComponent::UNet);  // the pipeline also does this between phases
    expect_same_images(pipe.run(request(dtype)), reference, "after releasing the UNet's pages");
  }
}

TEST(WeightCacheModel, DamagedOrForeignCachesAreRebuilt) {
  const fs::path dir = test::temp_dir("weight_cache_model_damaged");
  ModelLoadOptions heap;
  heap.weight_cache = false;
  auto reference = ShardedPipeline(StableDiffusionModel::load(test::tiny_sd_dir(), heap)).run(request(ComputeDType::F32));
  StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir))->wait_for_weight_caches();
  // Truncate one cache file and swap another for a cache of a different component.
  fs::path unet, vae, te;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("unet-", 0) == 0) unet = e.path();
    if (n.rfind("vae-", 0) == 0) vae = e.path();
    if (n.rfind("text_encoder-", 0) == 0) te = e.path();
  }
  ASSERT_FALSE(unet.empty() || vae.empty() || te.empty());
  fs::resize_file(unet, fs::file_size(unet) / 2);
  fs::copy_file(te, vae, fs::copy_options::overwrite_existing);
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir));
  EXPECT_FALSE(model->loaded_from_cache(ModelComponent::UNet));  // refused: truncated
  EXPECT_FALSE(model->loaded_from_cache(ModelComponent::Vae));   // mismatch: rebuilt
  EXPECT_TRUE(model->loaded_from_cache(ModelComponent::TextEncoder));
  for (const auto& n : model->load_notes()) std::printf("[weight cache] note: %s\n", n.c_str());
  ASSERT_EQ(model->load_notes().size(), 1u);
  EXPECT_NE(model->load_notes()[0].find("rebuilt the vae weight cache"), std::string::npos);
  expect_same_images(ShardedPipeline(model).run(request(ComputeDType::F32)), reference, "rebuilt caches");
  model->wait_for_weight_caches();
  auto again = StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir));
  EXPECT_TRUE(again->loaded_from_cache(ModelComponent::UNet));
  EXPECT_TRUE(again->loaded_from_cache(ModelComponent::Vae));
}

TEST(WeightCacheModel, FullDiskStillLoads) {
  const fs::path dir = test::temp_dir("weight_cache_model_full");
  ModelLoadOptions heap;
  heap.weight_cache = false;
  auto reference = ShardedPipeline(StableDiffusionModel::load(test::tiny_sd_dir(), heap)).run(request(ComputeDType::F32));
  ModelLoadOptions o = cached(dir);
  o.weight_cache_capacity_limit = 1;  // not even one grow step fits
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  // The first blob of each component already does not fit: known before load() returns.
  ASSERT_EQ(model->load_notes().size(), 3u);
  model->wait_for_weight_caches();
  for (const auto& n : model->load_notes()) {
    std::printf("[weight cache] note: %s\n", n.c_str());
    EXPECT_NE(n.find("no space left"), std::string::npos) << n;
  }
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
  expect_same_images(ShardedPipeline(model).run(request(ComputeDType::F32)), reference, "cache not kept: weights in memory");
}

TEST(WeightCacheModel, MlpBlockingIsBitIdentical) {
  ModelLoadOptions heap;
  heap.weight_cache = false;
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), heap);
  const auto& cfg = model->unet().config();
  Tensor x = Tensor::empty({2, 16, 16, cfg.in_channels});
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>((i * 7919) % 201 - 100) / 50.0f;
  Tensor ctx = Tensor::empty({2, 77, cfg.cross_attention_dim});
  for (int64_t i = 0; i < ctx.numel(); ++i) ctx[i] = static_cast<float>((i * 104729) % 301 - 150) / 100.0f;
  Numerics whole;
  whole.mlp_rows_per_block = 0;
  Tensor ref = model->unet().forward_nhwc(x, {500, 500}, ctx, whole);
  for (int64_t block : {1, 7, 100, 1024}) {
    Numerics n;
    n.mlp_rows_per_block = block;
    Tensor out = model->unet().forward_nhwc(x, {500, 500}, ctx, n);
    const test::Diff d = test::diff(out, ref);
    std::printf("[mlp blocks] %lld rows per block: max abs difference %.3g\n", static_cast<long long>(block), d.max_abs);
    EXPECT_EQ(d.max_abs, 0.0);
  }
}

TEST(WeightCacheModel, AFailureFoundWhileWritingInTheBackgroundIsReported) {
  // Every blob of the largest component fits but its blob table does not: the cache's writer
  // thread finds that at the very end, after the component has been handed over (possibly after
  // load() has returned). The model works regardless, and once the writes are done load_notes()
  // names the problem.
  const fs::path sizes_dir = test::temp_dir("weight_cache_model_sizes");
  StableDiffusionModel::load(test::tiny_sd_dir(), cached(sizes_dir))->wait_for_weight_caches();
  uintmax_t largest = 0;
  for (const auto& e : fs::directory_iterator(sizes_dir)) largest = std::max(largest, e.file_size());
  ASSERT_GT(largest, 0u);

  const fs::path dir = test::temp_dir("weight_cache_model_late_failure");
  ModelLoadOptions o = cached(dir);
  o.weight_cache_capacity_limit = largest - 1;  // the table's last byte no longer fits
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  model->wait_for_weight_caches();
  const auto notes = model->load_notes();
  for (const auto& n : notes) std::printf("[weight cache] late note: %s\n", n.c_str());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no space left"), std::string::npos) << notes[0];
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().extension(), ".octw") << "left behind: " << e.path();
    ++kept;
  }
  EXPECT_EQ(kept, 2);  // the two smaller components' caches were kept
  ModelLoadOptions heap;
  heap.weight_cache = false;
  auto reference = ShardedPipeline(StableDiffusionModel::load(test::tiny_sd_dir(), heap)).run(request(ComputeDType::F32));
  expect_same_images(ShardedPipeline(model).run(request(ComputeDType::F32)), reference, "cache given up while writing");
}

// The residency policy (model.h, WeightResidency): what stays mapped after a run.
TEST(WeightResidency, MinimalDropsEveryNetworkAfterItsPhase) {
  const fs::path dir = test::temp_dir("weight_residency_minimal");
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir));
  ASSERT_FALSE(model->weights_stay_resident());
  ShardedPipeline(model).run(request(ComputeDType::F32));
  for (auto c : {ModelComponent::TextEncoder, ModelComponent::UNet, ModelComponent::Vae})
    EXPECT_EQ(model->resident_weight_bytes(c), 0u) << "component " << static_cast<int>(c);
}

// The decode phase maps in the weights of the decoder it runs: the VAE's for a VAE decode, none
// of the model's cached networks for TAESD's (it was reading the whole VAE back for nothing).
TEST(WeightResidency, TheDecodePhaseMapsInOnlyTheDecoderItRuns) {
  const fs::path dir = test::temp_dir("weight_residency_decoder");
  ModelLoadOptions o = cached(dir);
  o.tiny_autoencoder = test::data_dir() / "tiny-taesd";
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  ShardedPipeline pipe(model);
  for (Decoder decoder : {Decoder::Vae, Decoder::Tiny}) {
    GenerationRequest r = request(ComputeDType::F32);
    r.decoder = decoder;
    uint64_t vae_while_decoding = 0;
    int decode_reports = 0;
    pipe.run(r, [&](const ProgressEvent& p) {  // Decode is reported as the phase starts and after each device
      if (p.phase != Phase::Decode) return;
      vae_while_decoding = std::max(vae_while_decoding, model->resident_weight_bytes(ModelComponent::Vae));
      ++decode_reports;
    });
    std::printf("[weight residency] %s decode: VAE weights resident during the decode phase %llu bytes\n",
                decoder_name(decoder).c_str(), static_cast<unsigned long long>(vae_while_decoding));
    EXPECT_GT(decode_reports, 0);
    if (decoder == Decoder::Vae)
      EXPECT_GT(vae_while_decoding, 0u);
    else
      EXPECT_EQ(vae_while_decoding, 0u);
    EXPECT_EQ(model->resident_weight_bytes(ModelComponent::Vae), 0u) << "after the run";
  }
}

TEST(WeightResidency, ResidentKeepsEveryNetworkMappedAcrossRuns) {
  const fs::path dir = test::temp_dir("weight_residency_resident");
  ModelLoadOptions o = cached(dir);
  o.residency = WeightResidency::Resident;
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  ASSERT_TRUE(model->weights_stay_resident());
  // The first load writes the cache in the background and then maps each network's blobs from the
  // file afresh (their pages present again only when next read): let it finish first, or on a
  // loaded machine a remap landing after the run empties a network's count (seen in CI: the text
  // encoder's 0 bytes after the first run).
  model->wait_for_weight_caches();
  ShardedPipeline pipe(model);
  const GenerationResult first = pipe.run(request(ComputeDType::F32));
  const uint64_t unet = model->resident_weight_bytes(ModelComponent::UNet);
  // Every UNet weight was read by the run, and nothing dropped it afterwards.
  EXPECT_GT(unet, 0u);
  EXPECT_GT(model->resident_weight_bytes(ModelComponent::Vae), 0u);
  EXPECT_GT(model->resident_weight_bytes(ModelComponent::TextEncoder), 0u);
  expect_same_images(pipe.run(request(ComputeDType::F32)), first, "second run, weights kept resident");
  EXPECT_EQ(model->resident_weight_bytes(ModelComponent::UNet), unet);
}

// warm_up() (the app, once a model is loaded) maps every network in where the weights stay
// resident, and nothing where the minimal residency keeps one network at a time.
TEST(WeightResidency, WarmUpMapsEveryNetworkInOnlyWhereWeightsStayResident) {
  const fs::path dir = test::temp_dir("weight_residency_warm_up");
  StableDiffusionModel::load(test::tiny_sd_dir(), cached(dir))->wait_for_weight_caches();  // the caches
  const auto components = {ModelComponent::TextEncoder, ModelComponent::UNet, ModelComponent::Vae};
  for (WeightResidency residency : {WeightResidency::Minimal, WeightResidency::Resident}) {
    ModelLoadOptions o = cached(dir);
    o.residency = residency;
    auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
    for (auto c : components) model->release(c);  // whatever the load read: from nothing (minimal)
    ASSERT_TRUE(model->loaded_from_cache(ModelComponent::UNet));
    uint64_t before = 0, after = 0;
    for (auto c : components) before += model->resident_weight_bytes(c);
    model->warm_up();
    model->wait_for_prefetch();
    for (auto c : components) after += model->resident_weight_bytes(c);
    std::printf("[weight residency] %s: %llu bytes of %llu mapped before warm_up(), %llu after\n",
                residency == WeightResidency::Resident ? "resident" : "minimal",
                static_cast<unsigned long long>(before),
                static_cast<unsigned long long>(model->cached_weight_bytes()),
                static_cast<unsigned long long>(after));
    if (residency == WeightResidency::Minimal) {
      EXPECT_EQ(after, 0u);
    } else {
      for (auto c : components) EXPECT_GT(model->resident_weight_bytes(c), 0u) << static_cast<int>(c);
      EXPECT_GE(after, model->cached_weight_bytes());  // every page of every blob (pages round up)
    }
  }
}

TEST(WeightResidency, AutoKeepsSmallModelsResidentAndTheEnvironmentOverrides) {
  const fs::path dir = test::temp_dir("weight_residency_auto");
  ModelLoadOptions o = cached(dir);
  o.residency = WeightResidency::Auto;
  // A few MB of weights against 25 % of any machine's memory.
  EXPECT_TRUE(StableDiffusionModel::load(test::tiny_sd_dir(), o)->weights_stay_resident());
  ::setenv("OCTODIFF_WEIGHT_RESIDENCY", "minimal", 1);
  EXPECT_FALSE(StableDiffusionModel::load(test::tiny_sd_dir(), o)->weights_stay_resident());
  ::setenv("OCTODIFF_WEIGHT_RESIDENCY", "always", 1);
  try {
    StableDiffusionModel::load(test::tiny_sd_dir(), o);
    ADD_FAILURE() << "a bad OCTODIFF_WEIGHT_RESIDENCY was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown weight residency 'always'"), std::string::npos) << e.what();
  }
  ::unsetenv("OCTODIFF_WEIGHT_RESIDENCY");
}

// The rule Auto applies (model.h): every network resident when their packed weights take at most
// a quarter of the RAM — the sizes of the models model.h names, on 24 GiB and 16 GB.
TEST(WeightResidency, AutoKeepsWeightsResidentUpToAQuarterOfTheRam) {
  const double gib24 = 24.0 * (1u << 30), gb16 = 16e9;
  const uint64_t sd15_bf16 = 2'200'000'000, sd15_f32 = 4'300'000'000, sdxl_bf16 = 8'300'000'000;
  EXPECT_EQ(auto_weight_residency(sd15_f32, gib24), WeightResidency::Resident);
  EXPECT_EQ(auto_weight_residency(sdxl_bf16, gib24), WeightResidency::Minimal);
  EXPECT_EQ(auto_weight_residency(sd15_bf16, gb16), WeightResidency::Resident);
  EXPECT_EQ(auto_weight_residency(sd15_f32, gb16), WeightResidency::Minimal);
  EXPECT_EQ(auto_weight_residency(static_cast<uint64_t>(gib24 / 4), gib24), WeightResidency::Resident);
  EXPECT_EQ(auto_weight_residency(static_cast<uint64_t>(gib24 / 4) + 1, gib24), WeightResidency::Minimal);
}
