// Weight storage outside a weight cache (core/memory.h): blobs come back zeroed and 64-byte
// aligned at every size, and a large one (mapped from the kernel on its own) is returned to the
// system when its last owner lets go.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/memory.h"

using namespace octodiff;

namespace {

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

TEST(WeightBytes, HeapBlobsOfEverySizeAreZeroedAndAligned) {
  for (size_t bytes : {size_t{1}, size_t{1000}, size_t{1} << 20, (size_t{2} << 20) - 1, size_t{2} << 20,
                       (size_t{3} << 20) + 5}) {
    // The first round dirties memory that a later, smaller block could be carved from.
    for (int round = 0; round < 2; ++round) {
      std::shared_ptr<void> blob = allocate_weight_bytes(bytes, "test");
      auto* p = static_cast<uint8_t*>(blob.get());
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
      EXPECT_TRUE(all_zero(p, bytes)) << bytes << " bytes, round " << round;
      std::memset(p, 0xA5, bytes);
    }
  }
}

TEST(WeightBytes, ALargeHeapBlobIsUnmappedWhenReleased) {
  const size_t bytes = size_t{8} << 20;
  std::shared_ptr<void> blob = allocate_weight_bytes(bytes, "test");
  auto* p = static_cast<uint8_t*>(blob.get());
  std::memset(p, 1, bytes);
  const long page = sysconf(_SC_PAGESIZE);
  auto* first_page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / page * page);
  unsigned char resident = 0;
  ASSERT_EQ(mincore(first_page, page, &resident), 0);
  blob.reset();
  errno = 0;
  EXPECT_EQ(mincore(first_page, page, &resident), -1) << "the block is still mapped after its release";
  EXPECT_EQ(errno, ENOMEM);
}
