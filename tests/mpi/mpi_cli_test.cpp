// octodiff-cli under `mpirun -n K` on the tiny model (built and registered only when CMake
// found MPI): one run's 8 devices over K = 1, 2, 3 ranks give the one-process run's files bit for
// bit; a sweep over 2 ranks gives the one-process sweep's images; a rank that cannot load the
// model ends the run with an error naming it, within seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/files.h"
#include "io/png.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

// `mpirun -n K octodiff-cli ARGS…` in `cwd`, with `env` (NAME=VALUE …) set for every rank.
test::CliRun run_mpi(int ranks, const std::vector<std::string>& args, const fs::path& cwd,
                     const std::vector<std::string>& env = {}, const std::vector<std::string>& options = {}) {
  std::vector<std::string> mpi = {"--allow-run-as-root", "--oversubscribe", "-n", std::to_string(ranks)};
  mpi.insert(mpi.end(), options.begin(), options.end());
  for (const std::string& e : env) mpi.insert(mpi.end(), {"-x", e});
  mpi.push_back(OCTODIFF_CLI_PATH);
  mpi.insert(mpi.end(), args.begin(), args.end());
  return test::run_program(OCTODIFF_MPIEXEC, mpi, cwd);
}

std::vector<std::string> eight_devices(const std::string& out) {
  std::vector<std::string> args = test::tiny_generate({"--steps", "2", "--seed", "42", "--threads", "1", "--out",
                                                       out + ".png", "--out-dir", out, "--save-array",
                                                       out + ".npy", "--quiet"});
  for (int i = 0; i < 8; ++i) args.insert(args.end(), {"--prompt", "shape number " + std::to_string(i)});
  return args;
}

std::string bytes_of(const fs::path& p) {
  const std::vector<uint8_t> b = read_file_bytes(p);
  return std::string(b.begin(), b.end());
}

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

}  // namespace

TEST(Mpi, EightDevicesOverOneTwoThreeRanksAreBitIdenticalToOneProcess) {
  const fs::path dir = test::temp_dir("mpi_generate");
  const test::CliRun one = test::run_cli(eight_devices("one"), dir);
  ASSERT_EQ(one.code, 0) << one.err;
  for (int k : {1, 2, 3}) {
    const std::string out = "k" + std::to_string(k);
    const test::CliRun r = run_mpi(k, eight_devices(out), dir);
    ASSERT_EQ(r.code, 0) << "K=" << k << "\n" << r.err << r.out;
    // The float images, the grid and every single image with its metadata: byte for byte.
    EXPECT_EQ(bytes_of(dir / (out + ".npy")), bytes_of(dir / "one.npy")) << "K=" << k;
    EXPECT_EQ(bytes_of(dir / (out + ".png")), bytes_of(dir / "one.png")) << "K=" << k;
    for (int i = 1; i <= 8; ++i) {
      const std::string name = "octodiff-42-" + std::to_string(i) + ".png";
      EXPECT_EQ(bytes_of(dir / out / name), bytes_of(dir / "one" / name)) << "K=" << k << " " << name;
    }
  }
}

TEST(Mpi, JsonNamesEveryRanksDevicesAndTimes) {
  const fs::path dir = test::temp_dir("mpi_json");
  std::vector<std::string> args = eight_devices("j");
  args.push_back("--json");
  const test::CliRun r = run_mpi(3, args, dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // rank 0 alone prints
  ASSERT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["ranks"][1]["devices"], nlohmann::json({3, 6}));
  EXPECT_EQ(j["ranks"][2]["items"], 2);
  EXPECT_GT(j["ranks"][2]["busy_seconds"].get<double>(), 0);
  EXPECT_GT(j["ranks"][1]["load_seconds"].get<double>(), 0);
}

TEST(Mpi, ASweepOverTwoRanksWritesTheOneProcessSweepsImages) {
  const fs::path dir = test::temp_dir("mpi_sweep");
  std::ofstream(dir / "prompts.txt") << "a red circle\na blue star\na green ring\n";
  auto sweep = [&](const std::string& out) {
    return test::tiny_generate({"--prompts-file", "prompts.txt", "--seeds", "0-3", "--steps", "2", "--threads", "1",
                                "--devices", "1", "--out-dir", out, "--json"});
  };
  const test::CliRun one = test::run_cli(sweep("one"), dir);
  ASSERT_EQ(one.code, 0) << one.err;
  const test::CliRun two = run_mpi(2, sweep("two"), dir);
  ASSERT_EQ(two.code, 0) << two.err;
  std::printf("%s", two.err.c_str());
  EXPECT_EQ(count_lines(dir / "two" / "index.jsonl"), 12);
  for (int p = 0; p < 3; ++p)
    for (int s = 0; s <= 3; ++s) {
      const std::string name = "p000" + std::to_string(p) + "-s" + std::to_string(s) + ".png";
      EXPECT_EQ(read_png(dir / "two" / name).rgb, read_png(dir / "one" / name).rgb) << name;
    }
  const auto j = nlohmann::json::parse(two.out);
  const auto& ranks = j["sweep"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0]["items"].get<int>() + ranks[1]["items"].get<int>(), 12);
  EXPECT_GT(ranks[1]["items"].get<int>(), 0);  // rank 1 took work
  EXPECT_NE(two.err.find("ETA"), std::string::npos) << two.err;
  // Resumed under MPI: nothing left to do.
  const test::CliRun again = run_mpi(2, sweep("two"), dir);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["sweep"]["written"], 0);
}

TEST(Mpi, ARankThatCannotLoadTheModelEndsTheRunNamingItsRankAndHost) {
  const fs::path dir = test::temp_dir("mpi_bad_rank");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r =
      run_mpi(3, eight_devices("bad"), dir, {"OCTODIFF_TEST_RANK_MODEL=2:" + (dir / "no-such-model").string()});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 2 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("could not load the model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("rank 1 (host"), std::string::npos) << r.err;  // the others loaded
  EXPECT_FALSE(fs::exists(dir / "bad.png"));
  EXPECT_LT(seconds, 60);
}

// mpirun ends a job whose process exits before MPI_Finalize at once, naming it in its own words
// (rank 0 then only says what happened: see mpi::start); with orte_abort_on_non_zero_status 0
// the job goes on and rank 0 finds the dead rank by its silence, names it and ends the job.
TEST(Mpi, ARankThatDiesMidSweepIsNamedByRank0AndFinishedItemsStayOnDisk) {
  const fs::path dir = test::temp_dir("mpi_dead_rank");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(2,
                                 test::tiny_generate({"--prompt", "a red circle", "--seeds", "0-5", "--steps", "2",
                                                      "--threads", "1", "--devices", "1", "--out-dir", "s",
                                                      "--mpi-timeout", "4"}),
                                 dir, {"OCTODIFF_TEST_RANK_EXIT=1"}, {"--mca", "orte_abort_on_non_zero_status", "0"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sent nothing for 4 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60);
  // Rank 0 went on with the other items: they are on disk and indexed, rank 1's is not.
  int pngs = 0;
  for (const auto& e : fs::directory_iterator(dir / "s")) pngs += e.path().extension() == ".png";
  EXPECT_GE(pngs, 1);
  EXPECT_EQ(count_lines(dir / "s" / "index.jsonl"), pngs);
  EXPECT_FALSE(fs::exists(dir / "s" / "p0000-s1.png"));  // the first item rank 1 was given
}

TEST(Mpi, WhenMpirunEndsTheJobRank0SaysWhatToDo) {
  const fs::path dir = test::temp_dir("mpi_killed_job");
  const test::CliRun r = run_mpi(2,
                                 test::tiny_generate({"--prompt", "a red circle", "--seeds", "0-5", "--steps", "2",
                                                      "--threads", "1", "--devices", "1", "--out-dir", "s"}),
                                 dir, {"OCTODIFF_TEST_RANK_EXIT=1"});
  std::printf("exit %d\n%s", r.code, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("Exit code:    3"), std::string::npos) << r.err;  // mpirun's own words
}

TEST(Mpi, ARandomSeedIsRank0sOnEveryRank) {
  const fs::path dir = test::temp_dir("mpi_random_seed");
  auto args = [](const std::string& seed, const std::string& out) {
    return test::tiny_generate({"--steps", "2", "--seed", seed, "--threads", "1", "--prompt", "a", "--prompt", "b",
                                "--prompt", "c", "--prompt", "d", "--out", out, "--json", "--quiet"});
  };
  const test::CliRun r = run_mpi(2, args("random", "random.png"), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const int64_t seed = nlohmann::json::parse(r.out)["settings"]["seed"];
  const test::CliRun one = test::run_cli(args(std::to_string(seed), "one.png"), dir);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(bytes_of(dir / "random.png"), bytes_of(dir / "one.png")) << "seed " << seed;
}
