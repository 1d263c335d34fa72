#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/device.h"
#include "core/parallel.h"
#include "core/thread_pool.h"

using namespace octodiff;

TEST(ThreadPool, RunsEveryChunkExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t chunks : {1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(chunks);
      for (int rep = 0; rep < 20; ++rep) pool.run(chunks, [&](int64_t c) { hits[c]++; });
      for (int64_t c = 0; c < chunks; ++c) ASSERT_EQ(hits[c].load(), 20) << threads << " threads, chunk " << c;
    }
  }
}

TEST(ThreadPool, RethrowsTheFirstErrorAndStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(16,
                        [&](int64_t c) {
                          ++ran;
                          if (c == 5) throw std::runtime_error("boom");
                        }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 16);  // the other chunks still ran
  std::atomic<int> after{0};
  pool.run(10, [&](int64_t) { ++after; });
  EXPECT_EQ(after.load(), 10);
}

TEST(ParallelFor, CoversTheRangeAndNestsSerially) {
  DeviceScope scope(DeviceContext{0, 4, nullptr});
  std::vector<int> seen(10007, 0);
  std::atomic<int> nested_threads{0};
  parallel_for(static_cast<int64_t>(seen.size()), [&](int64_t b, int64_t e) {
    nested_threads = std::max(nested_threads.load(), current_device().threads);
    for (int64_t i = b; i < e; ++i) seen[i]++;
  });
  for (int v : seen) ASSERT_EQ(v, 1);
  EXPECT_EQ(nested_threads.load(), 1);
}

TEST(ParallelFor, OversubscribedPoolsFinishQuickly) {
  // Many more threads than cores, repeatedly: must neither hang nor crawl.
  DeviceScope scope(DeviceContext{0, 16, nullptr});
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 2000; ++rep)
    parallel_for(64, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 2000 * 64);
}

TEST(ThreadPool, BackToBackJobsOfGrowingSizeRunEachChunkOnceAndFinishBeforeReturning) {
  // A helper still looking at the previous job's exhausted ticket must not take a chunk of the
  // next job, which has more chunks, before that job is published: the chunk would run twice
  // and run() could return while it is still running (a crash once the caller's frame is gone).
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(64);
    std::atomic<int> running{0};
    for (int rep = 0; rep < 20000; ++rep) {
      const int64_t chunks = rep % 2 ? 64 : 2;
      for (int64_t c = 0; c < chunks; ++c) hits[c] = 0;
      pool.run(chunks, [&](int64_t c) {
        ++running;
        ++hits[c];
        --running;
      });
      ASSERT_EQ(running.load(), 0) << threads << " threads, job " << rep << ": returned with a chunk running";
      for (int64_t c = 0; c < chunks; ++c)
        ASSERT_EQ(hits[c].load(), 1) << threads << " threads, job " << rep << ", chunk " << c;
    }
  }
}
