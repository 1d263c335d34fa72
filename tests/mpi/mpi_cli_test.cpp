// octodiff-cli under `mpirun -n K` on the tiny model (built and registered only when CMake
// found MPI): one run's 8 devices over K = 1, 2, 3 ranks give the one-process run's files bit for
// bit; a sweep over 2 ranks gives the one-process sweep's images; a rank that cannot load the
// model, or whose compute process dies (a crash, the OOM killer) under mpirun's default options,
// ends the run with an error on rank 0 naming the rank and its host, within seconds, the finished
// items on disk.
#include <gtest/gtest.h>
#include <unistd.h>

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

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

int count_pngs(const fs::path& dir) {
  int pngs = 0;
  for (const auto& e : fs::directory_iterator(dir)) pngs += e.path().extension() == ".png";
  return pngs;
}

std::vector<std::string> six_seeds(const std::string& out, const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = test::tiny_generate({"--prompt", "a red circle", "--seeds", "0-5", "--steps", "2",
                                                       "--threads", "1", "--devices", "1", "--out-dir", out});
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

// Under mpirun's default options (no --mca): rank 1's compute process crashes at its second unit
// of work; its MPI process tells rank 0, which names rank 1 and its host and ends the run; what
// was finished (rank 1's first item among it) is on disk, and a rerun resumes.
TEST(Mpi, ARankWhoseComputeProcessCrashesIsNamedByRank0AndFinishedItemsStayOnDisk) {
  const fs::path dir = test::temp_dir("mpi_crashed_rank");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(2, six_seeds("s"), dir, {"OCTODIFF_TEST_RANK_SIGNAL=1:11:2"});
  const double seconds = seconds_since(t0);
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 (host " + host_name() + ") died: signal 11 (Segmentation fault)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("mpirun ended the job"), std::string::npos) << r.err;  // rank 0 ended it, not mpirun
  EXPECT_LT(seconds, 60);
  const int pngs = count_pngs(dir / "s");
  EXPECT_GE(pngs, 1);
  EXPECT_LT(pngs, 6);
  EXPECT_EQ(count_lines(dir / "s" / "index.jsonl"), pngs);
  EXPECT_NE(read_text_file(dir / "s" / "index.jsonl").find("\"rank\":1"), std::string::npos);  // its first item
  // The rerun skips what is on disk and writes the rest.
  const test::CliRun again = run_mpi(2, six_seeds("s", {"--json"}), dir);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["sweep"]["written"].get<int>(), 6 - pngs);
  EXPECT_EQ(count_pngs(dir / "s"), 6);
}

// The OOM killer's SIGKILL while rank 2 loads the model.
TEST(Mpi, ARankKilledWhileLoadingTheModelIsNamedByRank0) {
  const fs::path dir = test::temp_dir("mpi_killed_loading");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(3, eight_devices("k"), dir, {"OCTODIFF_TEST_RANK_SIGNAL=2:9:0"});
  const double seconds = seconds_since(t0);
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 2 (host " + host_name() +
                       ") died while loading the model: killed (signal 9), possibly by the out-of-memory killer"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rank 1 (host"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "k.png"));
  EXPECT_LT(seconds, 60);
}

// SIGKILL at rank 1's devices of one run: no grid (it needs every device), a clear error.
TEST(Mpi, ARankKilledDuringOneRunIsNamedByRank0) {
  const fs::path dir = test::temp_dir("mpi_killed_run");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(2, eight_devices("k"), dir, {"OCTODIFF_TEST_RANK_SIGNAL=1:9"});
  const double seconds = seconds_since(t0);
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 (host " + host_name() + ") died: killed (signal 9)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "k.png"));
  EXPECT_LT(seconds, 60);
}

// Rank 0's own compute process crashes: its MPI process names it and ends the job.
TEST(Mpi, Rank0sComputeProcessCrashingIsNamed) {
  const fs::path dir = test::temp_dir("mpi_crashed_rank0");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(2, six_seeds("s"), dir, {"OCTODIFF_TEST_RANK_SIGNAL=0:11"});
  const double seconds = seconds_since(t0);
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 0 (host " + host_name() + ") died: signal 11 (Segmentation fault)"), std::string::npos)
      << r.err;
  EXPECT_LT(seconds, 60);
}

// A rank's MPI process itself ending (OCTODIFF_TEST_RANK_EXIT: as if it were killed) is mpirun's
// to report: by default it ends the job at once, naming the process in its own words, and rank 0
// says what to do. With orte_abort_on_non_zero_status 0 the job goes on and rank 0 finds the
// rank by its silence, names it and ends the job; the other items are on disk.
TEST(Mpi, ARankWhoseMpiProcessDiesIsFoundSilentWhenMpirunLetsTheJobGoOn) {
  const fs::path dir = test::temp_dir("mpi_dead_rank");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = run_mpi(2, six_seeds("s", {"--mpi-timeout", "4"}), dir, {"OCTODIFF_TEST_RANK_EXIT=1"},
                                 {"--mca", "orte_abort_on_non_zero_status", "0"});
  const double seconds = seconds_since(t0);
  std::printf("exit %d after %.1f s\n%s", r.code, seconds, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sent nothing for 4 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60);
  // Rank 0 went on with the other items: they are on disk and indexed, rank 1's is not.
  const int pngs = count_pngs(dir / "s");
  EXPECT_GE(pngs, 1);
  EXPECT_EQ(count_lines(dir / "s" / "index.jsonl"), pngs);
  EXPECT_FALSE(fs::exists(dir / "s" / "p0000-s1.png"));  // the first item rank 1 was given
}

TEST(Mpi, WhenMpirunEndsTheJobRank0SaysWhatToDo) {
  const fs::path dir = test::temp_dir("mpi_killed_job");
  const test::CliRun r = run_mpi(2, six_seeds("s"), dir, {"OCTODIFF_TEST_RANK_EXIT=1"});
  std::printf("exit %d\n%s", r.code, r.err.c_str());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("Exit code:    3"), std::string::npos) << r.err;  // mpirun's own words
  EXPECT_NE(r.err.find("mpirun ended the job"), std::string::npos) << r.err;  // rank 0's
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
