// The activation arena: freed blocks are reused (exact or up to twice the request), memory goes
// back to the system when nothing fits, and the counters say what happened.
#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/tensor.h"

using namespace octodiff;

TEST(CachingArena, ReusesFreedBlocks) {
  CachingArena arena;
  void* a = arena.allocate(1 << 20);
  arena.deallocate(a, 1 << 20);
  EXPECT_EQ(arena.allocate(1 << 20), a);                 // same size: same block
  arena.deallocate(a, 1 << 20);
  EXPECT_EQ(arena.allocate((1 << 20) - 4096 * 3), a);    // smaller, within 2×: reused
  EXPECT_EQ(arena.bytes_reserved(), size_t{1} << 20);
  arena.deallocate(a, 0);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
}

TEST(CachingArena, TooLargeBlocksAreNotWastedOnSmallRequests) {
  CachingArena arena;
  void* big = arena.allocate(8 << 20);
  arena.deallocate(big, 8 << 20);
  void* small = arena.allocate(1 << 20);  // 8× smaller: a new block, the big one is released
  EXPECT_NE(small, nullptr);
  EXPECT_EQ(arena.bytes_reserved(), size_t{1} << 20);
  EXPECT_EQ(arena.peak_bytes_reserved(), size_t{8} << 20);
  arena.deallocate(small, 1 << 20);
}

TEST(CachingArena, FootprintStaysNearTheLivePeakAcrossDistinctSizes) {
  CachingArena arena;
  // Many distinct sizes, never more than two blocks alive: exact-size caching would keep all.
  for (int round = 0; round < 3; ++round) {
    for (size_t mb = 1; mb <= 16; ++mb) {
      void* a = arena.allocate(mb << 20);
      void* b = arena.allocate(mb << 20);
      arena.deallocate(a, 0);
      arena.deallocate(b, 0);
    }
  }
  std::printf("[arena] peak live %zu MiB, peak reserved %zu MiB\n", arena.peak_bytes_in_use() >> 20,
              arena.peak_bytes_reserved() >> 20);
  EXPECT_LE(arena.peak_bytes_reserved(), 2 * arena.peak_bytes_in_use());
  arena.trim();
  EXPECT_EQ(arena.bytes_reserved(), 0u);
}

TEST(CachingArena, TensorsComeFromTheScopedArena) {
  CachingArena arena;
  {
    AllocatorScope scope(&arena);
    Tensor t = Tensor::zeros({256, 256});
    EXPECT_GE(arena.bytes_in_use(), 256u * 256u * 4u);
  }
  EXPECT_EQ(arena.bytes_in_use(), 0u);
}
