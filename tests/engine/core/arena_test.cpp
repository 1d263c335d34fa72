// The activation arena: blocks are placed best-fit in slabs, split and merged again, a repeated
// allocation pattern stops asking the system for memory after its first round, a growing size
// extends the free end instead of taking a slab beside it, trim() gives back the free end (whole
// free slabs) only, and the counters say what happened.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace octodiff;

TEST(CachingArena, ReusesFreedMemory) {
  CachingArena arena;
  void* a = arena.allocate(1 << 20);
  arena.deallocate(a, 1 << 20);
  EXPECT_EQ(arena.allocate(1 << 20), a);  // same size: same place
  arena.deallocate(a, 1 << 20);
  EXPECT_EQ(arena.allocate((1 << 20) - 4096 * 3), a);  // smaller: same place
  arena.deallocate(a, 0);
  EXPECT_EQ(arena.system_allocations(), 1u);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
  EXPECT_EQ(arena.bytes_reserved(), CachingArena::kMinSlab);
}

TEST(CachingArena, SplitsAndMergesNeighbours) {
  CachingArena arena;
  char* a = static_cast<char*>(arena.allocate(4 << 20));
  char* b = static_cast<char*>(arena.allocate(4 << 20));
  char* c = static_cast<char*>(arena.allocate(4 << 20));
  EXPECT_EQ(b, a + (4 << 20));  // one slab, packed
  EXPECT_EQ(c, b + (4 << 20));
  arena.deallocate(b, 0);
  arena.deallocate(a, 0);
  // a and b merged: an 8 MiB block fits where they were, without another slab.
  EXPECT_EQ(arena.allocate(8 << 20), a);
  EXPECT_EQ(arena.system_allocations(), 1u);
  // A request larger than a slab gets a slab of its own.
  void* big = arena.allocate(CachingArena::kMinSlab + 1);
  EXPECT_EQ(arena.system_allocations(), 2u);
  std::memset(big, 1, CachingArena::kMinSlab + 1);
  arena.deallocate(big, 0);
  arena.deallocate(a, 0);
  arena.deallocate(c, 0);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
}

TEST(CachingArena, ARepeatedPatternNeedsNoNewMemoryAfterItsFirstRound) {
  CachingArena arena;
  // A "step": many distinct sizes, some alive across others, as a UNet's activations are.
  auto step = [&] {
    std::vector<void*> held;
    for (size_t i = 1; i <= 24; ++i) {
      void* a = arena.allocate((i * 37 % 11 + 1) << 20);
      void* b = arena.allocate(i << 18);
      arena.deallocate(a, 0);
      held.push_back(b);
      if (held.size() > 6) {
        arena.deallocate(held.front(), 0);
        held.erase(held.begin());
      }
    }
    for (void* p : held) arena.deallocate(p, 0);
  };
  step();
  const size_t after_first = arena.system_allocations();
  for (int i = 0; i < 5; ++i) step();
  std::printf("[arena] slabs after the first round %zu, after six %zu; peak live %zu MiB, reserved %zu MiB\n",
              after_first, arena.system_allocations(), arena.peak_bytes_in_use() >> 20,
              arena.peak_bytes_reserved() >> 20);
  EXPECT_EQ(arena.system_allocations(), after_first);
  EXPECT_LE(arena.peak_bytes_reserved(), 2 * arena.peak_bytes_in_use() + CachingArena::kMinSlab);
}

TEST(CachingArena, TrimReleasesTheFreeEndOnly) {
  CachingArena arena;
  void* kept = arena.allocate(1 << 20);
  void* big = arena.allocate(CachingArena::kMinSlab * 2);
  arena.deallocate(big, 0);
  arena.trim();
  // What holds `kept` stays (its 2 MiB page; a slab where the range could not be reserved).
  EXPECT_GE(arena.bytes_reserved(), size_t{1} << 20);
  EXPECT_LE(arena.bytes_reserved(), CachingArena::kMinSlab);
  std::memset(kept, 2, 1 << 20);  // and is still usable
  arena.deallocate(kept, 0);
  arena.trim();
  EXPECT_EQ(arena.bytes_reserved(), 0u);
  // Usable again after everything was handed back.
  void* again = arena.allocate(3 << 20);
  std::memset(again, 3, 3 << 20);
  arena.deallocate(again, 0);
}

// Sizes that grow stage by stage (a VAE decoder's 32, 128, 256 MB activations): a request larger
// than any free range extends the free end of what the arena holds, so memory already touched
// below it is reused instead of a fresh slab taken beside it.
TEST(CachingArena, AGrowingSizeExtendsTheFreeEnd) {
  const size_t slab = CachingArena::kMinSlab;
  CachingArena arena;
  char* a = static_cast<char*>(arena.allocate(slab / 2));
  char* b = static_cast<char*>(arena.allocate(slab / 2));
  arena.deallocate(a, 0);
  arena.deallocate(b, 0);
  char* c = static_cast<char*>(arena.allocate(2 * slab));
  std::memset(c, 4, 2 * slab);
  std::printf("[arena] %zu MiB after %zu MiB freed: reserved %zu MiB, %zu system allocations\n", (2 * slab) >> 20,
              slab >> 20, arena.peak_bytes_reserved() >> 20, arena.system_allocations());
  if (c == a) {  // the range was reserved (else each slab is its own allocation, as before)
    EXPECT_EQ(arena.peak_bytes_reserved(), 2 * slab);
    EXPECT_EQ(arena.system_allocations(), 2u);
  } else {
    EXPECT_EQ(arena.peak_bytes_reserved(), 3 * slab);
  }
  arena.deallocate(c, 0);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
}

// More than the machine has is a clear error, as from malloc: committing a part of the reserved
// range is refused by the kernel's overcommit check (modes 0 and 2; mode 1 grants anything).
TEST(CachingArena, AnImpossibleSizeIsAClearError) {
  std::ifstream policy("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  policy >> mode;
  if (mode == 1) GTEST_SKIP() << "vm.overcommit_memory = 1: the kernel grants any size";
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  ASSERT_GT(pages, 0);
  const size_t ram = static_cast<size_t>(pages) * static_cast<size_t>(page);
  CachingArena arena;
  void* small = arena.allocate(1 << 20);
  // Inside the 64 GiB range where RAM is under 32 GiB (its commit is refused), beyond it elsewhere.
  for (size_t bytes : {2 * ram, size_t{1} << 40}) {
    try {
      arena.allocate(bytes);
      ADD_FAILURE() << bytes << " bytes were granted";
    } catch (const Error& e) {
      std::printf("[arena] %zu MiB: %s\n", bytes >> 20, e.what());
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
    }
  }
  std::memset(small, 5, 1 << 20);  // what was allocated before is untouched and usable
  arena.deallocate(small, 0);
  EXPECT_EQ(arena.bytes_in_use(), 0u);
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
