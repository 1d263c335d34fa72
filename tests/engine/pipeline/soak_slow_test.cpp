// The soak (tests/engine/pipeline/soak.h): 200 generations in one process mixing sizes,
// schedulers, f32/bf16 and LoRA sets, a third of them cancelled; every completed one identical to
// a fresh run. RSS at start and end is printed and kept in test-results/soak.json (a report, not
// asserted). Label slow; fuzz/README.md-style numbers from the LSan run are in the closing note.
#include <cstdlib>

#include "soak.h"

TEST(Soak, TwoHundredMixedGenerationsWithCancelsMatchFreshRuns) {
  const int generations = std::getenv("OCTODIFF_SOAK_GENERATIONS") ? std::atoi(std::getenv("OCTODIFF_SOAK_GENERATIONS")) : 200;
  const auto r = octodiff::test::run_soak(generations, /*seed=*/1);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_GT(r.completed, generations / 2);
  EXPECT_GT(r.cancelled, 0);
  std::filesystem::create_directories(OCTODIFF_TEST_RESULTS_DIR);
  std::ofstream(std::filesystem::path(OCTODIFF_TEST_RESULTS_DIR) / "soak.json")
      << "{\"generations\": " << generations << ", \"completed\": " << r.completed << ", \"cancelled\": " << r.cancelled
      << ", \"mismatches\": " << r.mismatches << ", \"seconds\": " << r.seconds << ", \"rss_start_mib\": " << r.rss_start_mib
      << ", \"rss_after_first_mib\": " << r.rss_after_first_mib << ", \"rss_end_mib\": " << r.rss_end_mib << "}\n";
}
