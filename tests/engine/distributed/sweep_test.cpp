// Sweeps: item enumeration, names, the prompts file, the output folder's resume rules, and a
// group of items giving each item the images of its plain one-device run.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "distributed/sweep.h"
#include "distributed/sweep_store.h"
#include "io/files.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Image8 small_image(uint8_t value) {
  Image8 im;
  im.width = im.height = 4;
  im.rgb.assign(4 * 4 * 3, value);
  return im;
}

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

}  // namespace

TEST(Sweep, SeedRangesParseAndBadOnesAreRefused) {
  EXPECT_EQ(parse_seed_range("0-99").count(), 100);
  EXPECT_EQ(parse_seed_range("7").first, 7);
  EXPECT_EQ(parse_seed_range("7").last, 7);
  for (const char* bad : {"", "a-b", "5-3", "-3", "1-", "1-2-3", "0-99999999"})
    EXPECT_THROW(parse_seed_range(bad), Error) << bad;
  EXPECT_NE(error_of([] { parse_seed_range("5-3"); }).find("smaller"), std::string::npos);
}

TEST(Sweep, ItemsArePromptMajorWithStableNames) {
  const auto items = enumerate_sweep_items({"a", "b"}, {10, 12});
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[0].prompt, "a");
  EXPECT_EQ(items[0].seed, 10);
  EXPECT_EQ(items[2].seed, 12);
  EXPECT_EQ(items[3].prompt, "b");
  EXPECT_EQ(items[3].prompt_index, 1);
  EXPECT_EQ(items[5].index, 5);
  EXPECT_EQ(sweep_item_file(items[4], 0, 1), "p0001-s11.png");
  EXPECT_EQ(sweep_item_file(items[4], 1, 2), "p0001-s11-2.png");
  EXPECT_THROW(enumerate_sweep_items({}, {0, 1}), Error);
}

TEST(Sweep, PromptsFileSkipsBlankLinesAndCarriageReturns) {
  const fs::path dir = test::temp_dir("sweep_prompts");
  write_text(dir / "p.txt", "a red circle\r\n\n  \nun carré bleu\n");
  EXPECT_EQ(read_prompts_file(dir / "p.txt"), (std::vector<std::string>{"a red circle", "un carré bleu"}));
  write_text(dir / "empty.txt", "\n\n");
  EXPECT_NE(error_of([&] { read_prompts_file(dir / "empty.txt"); }).find("empty.txt"), std::string::npos);
  EXPECT_NE(error_of([&] { read_prompts_file(dir / "missing.txt"); }).find("missing.txt"), std::string::npos);
}

TEST(Sweep, TheItemKeyIsThePlainOneDeviceRunsKey) {
  for (int64_t seed : {0, 42, 123456})
    EXPECT_EQ(sweep_item_key(seed, jax::RngScheme::Classic),
              jax::split(jax::prng_key(seed), 1, jax::RngScheme::Classic)[0]);
}

TEST(SweepStore, FinishedItemsAreSkippedAndBrokenOnesRedone) {
  const fs::path dir = test::temp_dir("sweep_store");
  const auto items = enumerate_sweep_items({"a", "b"}, {0, 1});
  {
    SweepStore store(dir, R"({"steps": 2})", 1);
    store.reconcile(items);
    EXPECT_EQ(store.pending(items).size(), 4u);
    for (int i : {0, 1, 3}) store.write_item(items[i], {small_image(10 * i)}, {{}}, R"({"rank": 1})");
  }
  EXPECT_EQ(count_lines(dir / "index.jsonl"), 3);
  // An interruption: a PNG cut short, an image written but its index line lost, a cut index line.
  const std::vector<uint8_t> png = read_file_bytes(dir / "p0000-s1.png");
  write_text(dir / "p0000-s1.png", std::string(png.begin(), png.begin() + png.size() / 2));
  write_png(dir / "p0001-s0.png", small_image(1), {});
  std::ofstream(dir / "index.jsonl", std::ios::app) << R"({"item": 2, "prompt_in)";
  SweepStore again(dir, R"({"steps": 2})", 1);
  again.reconcile(items);
  EXPECT_EQ(again.finished_at_open(), 3);  // p0000-s0, p0001-s0 (found on disk), p0001-s1
  const auto pending = again.pending(items);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(sweep_item_stem(pending[0]), "p0000-s1");
  again.write_item(pending[0], {small_image(7)}, {{}}, "{}");
  EXPECT_TRUE(again.pending(items).empty());
  EXPECT_EQ(count_lines(dir / "index.jsonl"), 6);  // 3 + the found one + the cut one + the new one
}

TEST(SweepStore, AFolderOfAnotherSweepIsRefusedNamingTheDifference) {
  const fs::path dir = test::temp_dir("sweep_other");
  { SweepStore store(dir, R"({"steps": 2, "scale": 1})", 1); }
  const std::string e = error_of([&] { SweepStore other(dir, R"({"steps": 4, "scale": 1})", 1); });
  EXPECT_NE(e.find("steps 2 (now 4)"), std::string::npos) << e;
  EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
}

TEST(SweepGroup, EachItemOfAGroupHasItsPlainRunsImages) {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  ShardedPipeline pipe(model);
  GenerationRequest base;
  base.steps = 2;
  base.threads = 2;
  const auto items = enumerate_sweep_items({"a red circle", "a blue star"}, {3, 4});
  const GenerationResult group = pipe.run(sweep_group_request(base, {items[1], items[2], items[3]}));
  for (int g = 0; g < 3; ++g) {
    const SweepItem& item = items[g + 1];
    GenerationRequest plain = base;
    plain.prompts = {item.prompt};
    plain.seed = item.seed;
    const GenerationResult one = pipe.run(plain);
    const GenerationResult mine = sweep_item_result(group, g);
    ASSERT_EQ(mine.images.shape(), one.images.shape());
    EXPECT_EQ(std::memcmp(mine.images.data(), one.images.data(), sizeof(float) * one.images.numel()), 0)
        << sweep_item_stem(item);
    EXPECT_EQ(mine.device_keys, one.device_keys);
    EXPECT_EQ(mine.prompts, one.prompts);
    EXPECT_EQ(mine.signature, one.signature);
  }
}

TEST(SweepGroup, PerDeviceInputsAreRefused) {
  GenerationRequest base;
  base.latents = Tensor::zeros({1, 1, 4, 8, 8});
  EXPECT_THROW(sweep_group_request(base, enumerate_sweep_items({"a"}, {0, 0})), Error);
}

TEST(SweepStore, AnItemMadeFromAnotherPromptIsRefused) {
  const fs::path dir = test::temp_dir("sweep_edited_prompts");
  {
    SweepStore store(dir, "{}", 1);
    const auto items = enumerate_sweep_items({"a red circle"}, {0, 0});
    store.reconcile(items);
    store.write_item(items[0], {small_image(3)}, {{}}, "{}");
  }
  SweepStore again(dir, "{}", 1);
  const auto edited = enumerate_sweep_items({"a blue star"}, {0, 0});
  const std::string e = error_of([&] { again.reconcile(edited); });
  EXPECT_NE(e.find("p0000-s0"), std::string::npos) << e;
  EXPECT_NE(e.find("a red circle"), std::string::npos) << e;
}
