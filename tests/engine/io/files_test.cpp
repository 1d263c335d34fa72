// MappedFile::read_ahead: a checkpoint that is not in the page cache is read into it by the
// file's own thread while the caller goes on.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

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

TEST(MappedFile, ReadAheadBringsAColdFileIntoThePageCache) {
  auto dir = test::temp_dir("files_read_ahead");
  const fs::path p = dir / "weights.bin";
  constexpr size_t kBytes = 48u << 20;
  {
    std::vector<char> data(kBytes, 'x');
    std::ofstream(p, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  // Evict the file: written back first, so that its now clean pages can be dropped.
  const int fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);

  MappedFile f(p);
  const size_t pages = kBytes / 4096, before = resident_pages(f.data(), kBytes);
  std::printf("[read ahead] %zu of %zu pages in the page cache before\n", before, pages);
  if (before > pages / 2) GTEST_SKIP() << "this file system kept the file in memory; nothing to read ahead";

  f.read_ahead();
  f.read_ahead();  // a second call starts nothing new
  size_t now = before;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((now = resident_pages(f.data(), kBytes)) < pages && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::printf("[read ahead] %zu of %zu pages in the page cache after read_ahead()\n", now, pages);
  EXPECT_EQ(now, pages);

  const fs::path empty = dir / "empty.bin";
  std::ofstream(empty, std::ios::binary).flush();
  MappedFile e(empty);
  e.read_ahead();  // nothing to read: no thread, no error
  EXPECT_EQ(e.size(), 0u);
}
