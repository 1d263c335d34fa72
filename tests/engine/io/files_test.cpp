// MappedFile::read_ahead: a checkpoint that is not in the page cache is read into it by the
// file's own thread while the caller goes on. MappedFile::release: a converted tensor's pages
// leave the page cache.
#include "io/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

// Pages of [p, p + bytes) in the page cache (p page-aligned).
// A file of `bytes` bytes, out of the page cache (written back first, so that its clean pages
// can be dropped).
fs::path cold_file(const fs::path& dir, size_t bytes) {
  const fs::path p = dir / "weights.bin";
  {
    // In 1 MiB pieces: a buffer of the whole file would stay in this process's memory under
    // ASan's quarantine and inflate the peak RSS that png_test's child processes measure.
    const std::vector<char> piece(1u << 20, 'x');
    std::ofstream out(p, std::ios::binary);
    for (size_t done = 0; done < bytes; done += piece.size())
      out.write(piece.data(), static_cast<std::streamsize>(std::min(piece.size(), bytes - done)));
  }
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return p;
}

// Waits (up to 30 s) until the read-ahead has brought in at least `want` bytes; returns how many.
uint64_t wait_for_progress(const MappedFile& f, uint64_t want) {
  uint64_t now = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((now = f.read_ahead_progress()) < want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return now;
}

}  // namespace

// The page cache may drop pages again at any time (memory pressure, reclaim), so what the tests
// check is how far the read-ahead got; residency is printed, and checked right after reading.
TEST(MappedFile, ReadAheadBringsAColdFileIntoThePageCache) {
  constexpr size_t kBytes = 48u << 20, kPages = kBytes / 4096;
  const fs::path dir = test::temp_dir("files_read_ahead");
  MappedFile f(cold_file(dir, kBytes));
  const size_t before = f.resident_pages(0, kBytes);
  std::printf("[read ahead] %zu of %zu pages in the page cache before\n", before, kPages);
  if (before > kPages / 2) GTEST_SKIP() << "this file system kept the file in memory; nothing to read ahead";

  f.read_ahead();
  f.read_ahead();  // a second call starts nothing new
  EXPECT_EQ(wait_for_progress(f, kBytes), kBytes);
  const size_t after = f.resident_pages(0, kBytes);
  std::printf("[read ahead] read to the end; %zu of %zu pages in the page cache\n", after, kPages);
  EXPECT_GT(after, kPages / 2);

  const fs::path empty = dir / "empty.bin";
  std::ofstream(empty, std::ios::binary).flush();
  MappedFile e(empty);
  e.read_ahead();  // nothing to read: no thread, no error
  EXPECT_EQ(e.size(), 0u);
}

TEST(MappedFile, ReadAheadStaysWithinItsLeadOfWhatWasUsed) {
  constexpr size_t kBytes = 128u << 20, kLead = 8u << 20, kStep = 4u << 20;
  MappedFile f(cold_file(test::temp_dir("files_read_ahead_lead"), kBytes));
  if (f.resident_pages(0, kBytes) > kBytes / 4096 / 2) GTEST_SKIP() << "this file system kept the file in memory";

  f.read_ahead(kLead);
  const uint64_t first = wait_for_progress(f, kLead);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // time to run on, if it would
  const uint64_t held = f.read_ahead_progress();
  std::printf("[read ahead] lead of %zu MiB: %llu MiB read, %llu MiB after 300 ms more\n", kLead >> 20,
              static_cast<unsigned long long>(first >> 20), static_cast<unsigned long long>(held >> 20));
  EXPECT_GE(held, kLead);
  EXPECT_LE(held, kLead + kStep) << "read on past its lead beyond the bytes used";

  f.note_use(kBytes - kLead);  // the loader got there: the rest follows
  EXPECT_EQ(wait_for_progress(f, kBytes), kBytes);
}

// The loader takes tensors in model order, not file order: what it has used and released before
// the read-ahead got there is not read back in from the disk.
TEST(MappedFile, ReadAheadSkipsReleasedPages) {
  constexpr size_t kBytes = 32u << 20, kFrom = 4u << 20, kLen = 16u << 20;
  MappedFile f(cold_file(test::temp_dir("files_read_ahead_released"), kBytes));
  if (f.resident_pages(0, kBytes) > kBytes / 4096 / 2)
    GTEST_SKIP() << "this file system kept the file in memory";

  f.release(kFrom, kLen);
  f.read_ahead(kBytes);
  EXPECT_EQ(wait_for_progress(f, kBytes), kBytes);
  const uint64_t read = f.read_ahead_bytes_read();
  std::printf("[read ahead] %llu MiB read of a %zu MiB file with %zu MiB released\n",
              static_cast<unsigned long long>(read >> 20), kBytes >> 20, kLen >> 20);
  EXPECT_GT(read, 0u);
  EXPECT_LE(read, kBytes - kLen) << "released pages were read back in";
}

// A large released range leaves the page cache as well as the mapping (a first load reuses those
// pages for the packed weights); the rest of the file, and a small released range (a bias that
// the next load reads again), stay. The ranges are aligned to 2 MiB: the page cache may hold a
// file in folios of up to that size and drops only folios wholly inside a range.
TEST(MappedFile, ReleaseDropsThePagesFromThePageCache) {
  constexpr size_t kBytes = 16u << 20, kPages = kBytes / 4096, kFrom = 2u << 20, kLen = 4u << 20;
  const fs::path dir = test::temp_dir("files_release");
  MappedFile f(cold_file(dir, kBytes));
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < kBytes; i += 4096) sum = sum + f.data()[i];  // fault every page in
  const size_t resident = f.resident_pages(0, kBytes);
  std::printf("[release] %zu of %zu pages resident after reading\n", resident, kPages);
  if (resident < kPages) GTEST_SKIP() << "the page cache did not keep the file while it was read";

  f.release(kFrom, kLen);
  f.release(kBytes - (2u << 20), 64u << 10);  // small: stays in the page cache
  const size_t front = f.resident_pages(0, kFrom), dropped = f.resident_pages(kFrom, kLen);
  const size_t back = f.resident_pages(kFrom + kLen, kBytes - kFrom - kLen);
  std::printf("[release] after: before the range %zu of %zu pages, in it %zu of %zu, after it %zu of %zu\n",
              front, kFrom / 4096, dropped, kLen / 4096, back, (kBytes - kFrom - kLen) / 4096);
  struct statfs fs_info {};
  if (dropped > 0 && ::statfs(dir.c_str(), &fs_info) == 0 && fs_info.f_type == TMPFS_MAGIC)
    GTEST_SKIP() << "tmpfs keeps a file's pages in memory: nothing to drop";
  EXPECT_EQ(dropped, 0u) << "released pages are still in the page cache";
  EXPECT_EQ(front, kFrom / 4096) << "pages before the range were dropped";
  EXPECT_EQ(back, (kBytes - kFrom - kLen) / 4096)
      << "pages after the range, or the small released range there, were dropped";
}
