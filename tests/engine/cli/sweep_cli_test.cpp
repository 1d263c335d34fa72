// octodiff-cli generate --seeds / --prompts-file: a sweep in one process on the tiny model —
// every item's PNG equals its plain run's, the index, resumption after an interruption.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/files.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

std::vector<std::string> sweep_args(const fs::path& prompts, const std::string& seeds, const std::string& out) {
  return test::tiny_generate({"--prompts-file", prompts.string(), "--seeds", seeds, "--steps", "2", "--threads",
                              "2", "--out-dir", out, "--quiet"});
}

}  // namespace

TEST(SweepCli, EveryItemIsItsPlainRunsImageAndARerunSkipsFinishedItems) {
  const fs::path dir = test::temp_dir("cli_sweep");
  std::ofstream(dir / "prompts.txt") << "a red circle\na blue star\n";
  test::CliRun r = test::run_cli(sweep_args(dir / "prompts.txt", "5-7", "sweep"), dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("6 items"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(dir / "sweep" / "index.jsonl"), 6);
  EXPECT_TRUE(fs::exists(dir / "sweep" / "sweep.json"));

  // Item (prompt 1, seed 6) is `generate --prompt "a blue star" --seed 6`.
  test::CliRun plain = test::run_cli(
      test::tiny_generate({"--prompt", "a blue star", "--seed", "6", "--steps", "2", "--out-dir", "plain", "--quiet"}),
      dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  std::vector<PngText> item_texts, plain_texts;
  const Image8 item = read_png(dir / "sweep" / "p0001-s6.png", &item_texts);
  const Image8 one = read_png(dir / "plain" / "octodiff-6-1.png", &plain_texts);
  EXPECT_EQ(item.rgb, one.rgb);
  const auto item_meta = parse_png_metadata(item_texts), plain_meta = parse_png_metadata(plain_texts);
  ASSERT_TRUE(item_meta && plain_meta);
  EXPECT_EQ(item_meta->seed, 6);
  EXPECT_EQ(item_meta->prompts, plain_meta->prompts);
  EXPECT_EQ(item_meta->device_key, plain_meta->device_key);
  EXPECT_EQ(item_meta->devices, 1);

  // An interruption: one image gone, one cut short. The rerun writes those two only.
  fs::remove(dir / "sweep" / "p0000-s5.png");
  const std::vector<uint8_t> bytes = read_file_bytes(dir / "sweep" / "p0001-s7.png");
  std::ofstream(dir / "sweep" / "p0001-s7.png", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 40);
  test::CliRun again = test::run_cli(sweep_args(dir / "prompts.txt", "5-7", "sweep"), dir);
  ASSERT_EQ(again.code, 0) << again.err;
  std::printf("%s", again.out.c_str());
  EXPECT_NE(again.out.find("4 finished already, 2 to run"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("2 items written"), std::string::npos) << again.out;
  EXPECT_EQ(read_png(dir / "sweep" / "p0001-s7.png").rgb.size(), one.rgb.size());

  // A wider seed range extends the sweep; other settings are refused.
  test::CliRun wider = test::run_cli(sweep_args(dir / "prompts.txt", "5-8", "sweep"), dir);
  ASSERT_EQ(wider.code, 0) << wider.err;
  EXPECT_NE(wider.out.find("6 finished already, 2 to run"), std::string::npos) << wider.out;
  auto other = sweep_args(dir / "prompts.txt", "5-8", "sweep");
  other[std::find(other.begin(), other.end(), "--steps") - other.begin() + 1] = "3";
  test::CliRun refused = test::run_cli(other, dir);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("other settings"), std::string::npos) << refused.err;
}

TEST(SweepCli, JsonReportsThroughputAndBadOptionsAreRefused) {
  const fs::path dir = test::temp_dir("cli_sweep_json");
  auto args = test::tiny_generate({"--prompt", "a green ring", "--seeds", "0-2", "--steps", "1", "--out-dir", "s",
                                   "--json", "--devices", "2"});
  test::CliRun r = test::run_cli(args, dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sweep"]["written"], 3);
  EXPECT_EQ(j["sweep"]["runs"], 2);  // groups of 2: 2 + 1
  EXPECT_EQ(j["sweep"]["ranks"].size(), 1u);
  EXPECT_GT(j["sweep"]["items_per_minute"].get<double>(), 0);
  test::CliRun no_dir = test::run_cli(test::tiny_generate({"--prompt", "a", "--seeds", "0-2"}), dir);
  EXPECT_EQ(no_dir.code, 1);
  EXPECT_NE(no_dir.err.find("--out-dir"), std::string::npos) << no_dir.err;
  test::CliRun both = test::run_cli(test::tiny_generate({"--prompt", "a", "--seeds", "0-2", "--seed", "1", "--out-dir", "x"}), dir);
  EXPECT_EQ(both.code, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
}
