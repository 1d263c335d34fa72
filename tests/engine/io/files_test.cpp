// MappedFile::read_ahead: a checkpoint that is not in the page cache is read into it by the
// file's own thread while the caller goes on.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "io/files.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

// Pages of [p, p + bytes) in the page cache (p page-aligned).
size_t resident_pages(const uint8_t* p, size_t bytes) {
  std::vector<unsigned char> v((bytes + 4095) / 4096);
  if (::mincore(const_cast<uint8_t*>(p), bytes, v.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char r : v) n += r & 1;
  return n;
}

}  // namespace

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

// Waits (up to 30 s) until at least `want` pages of the mapping are resident; returns how many are.
size_t wait_for_pages(const MappedFile& f, size_t want) {
  size_t now = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((now = resident_pages(f.data(), f.size())) < want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return now;
}

TEST(MappedFile, ReadAheadBringsAColdFileIntoThePageCache) {
  constexpr size_t kBytes = 48u << 20, kPages = kBytes / 4096;
  const fs::path dir = test::temp_dir("files_read_ahead");
  MappedFile f(cold_file(dir, kBytes));
  const size_t before = resident_pages(f.data(), kBytes);
  std::printf("[read ahead] %zu of %zu pages in the page cache before\n", before, kPages);
  if (before > kPages / 2) GTEST_SKIP() << "this file system kept the file in memory; nothing to read ahead";

  f.read_ahead();
  f.read_ahead();  // a second call starts nothing new
  const size_t now = wait_for_pages(f, kPages);
  std::printf("[read ahead] %zu of %zu pages in the page cache after read_ahead()\n", now, kPages);
  EXPECT_EQ(now, kPages);

  const fs::path empty = dir / "empty.bin";
  std::ofstream(empty, std::ios::binary).flush();
  MappedFile e(empty);
  e.read_ahead();  // nothing to read: no thread, no error
  EXPECT_EQ(e.size(), 0u);
}

TEST(MappedFile, ReadAheadStaysWithinItsLeadOfWhatWasUsed) {
  // The kernel adds its own readahead behind each read (read_ahead_kb: 8 MiB on the development
  // VM's disk), so the bound checked is loose: well short of the whole file.
  constexpr size_t kBytes = 128u << 20, kPages = kBytes / 4096, kLead = 8u << 20;
  MappedFile f(cold_file(test::temp_dir("files_read_ahead_lead"), kBytes));
  if (resident_pages(f.data(), kBytes) > kPages / 2) GTEST_SKIP() << "this file system kept the file in memory";

  f.read_ahead(kLead);
  const size_t first = wait_for_pages(f, kLead / 4096);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // time to run on, if it would
  const size_t held = resident_pages(f.data(), kBytes);
  std::printf("[read ahead] lead of %zu pages: %zu resident, %zu after 500 ms more (of %zu)\n", kLead / 4096, first,
              held, kPages);
  EXPECT_GE(held, kLead / 4096);
  EXPECT_LE(held, kPages / 4) << "read on far past its lead beyond the bytes used";

  f.note_use(kBytes - kLead);  // the loader got there: the rest follows
  const size_t now = wait_for_pages(f, kPages);
  std::printf("[read ahead] after using up to the last lead: %zu of %zu\n", now, kPages);
  EXPECT_EQ(now, kPages);
}
