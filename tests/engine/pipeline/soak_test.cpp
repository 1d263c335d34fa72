// The soak, short (tests/engine/pipeline/soak.h): 12 generations (a CI-sized slice) in one process, each completed
// one identical to a fresh run; RSS printed. The 200-generation soak is soak_slow_test.cpp.
#include "soak.h"

TEST(Soak, TwelveMixedGenerationsWithCancelsMatchFreshRuns) {
  const auto report = octodiff::test::run_soak(12, /*seed=*/20261126);
  EXPECT_EQ(report.mismatches, 0);
  EXPECT_GT(report.completed, 0);
  EXPECT_GT(report.cancelled, 0);  // the seed is chosen so that some runs are cancelled
}
