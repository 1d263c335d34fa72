// The weight cache file: what is written reads back identically, in order, with its tags; any file
// that is not a complete cache of this format is refused with a reason, never mapped; a full disk
// keeps the blobs in memory (the cache is not kept) without failing the load.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "io/weight_cache.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

// Writes blobs of the given sizes, each filled with its index + 1, and commits.
std::shared_ptr<WeightCacheFile> write_cache(const fs::path& path, const std::vector<size_t>& sizes,
                                             uint64_t limit = 0) {
  auto cache = WeightCacheFile::create(path, limit);
  WeightStorageScope scope(cache.get());
  std::vector<std::shared_ptr<void>> keep;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keep.push_back(allocate_weight_bytes(sizes[i], "blob " + std::to_string(i)));
    std::memset(keep.back().get(), static_cast<int>(i + 1), sizes[i]);
  }
  cache->commit();
  return cache;
}

std::string refusal(const fs::path& path) {
  std::string why;
  auto c = WeightCacheFile::open(path, &why);
  EXPECT_EQ(c, nullptr) << path;
  std::printf("[weight cache] %s refused: %s\n", path.filename().c_str(), why.c_str());
  return why;
}

}  // namespace

TEST(WeightCache, WrittenBlobsReadBackInOrder) {
  const fs::path dir = test::temp_dir("weight_cache_roundtrip");
  const std::vector<size_t> sizes{100, 4096, 70000, 3};
  auto written = write_cache(dir / "c.octw", sizes);
  EXPECT_TRUE(written->warning().empty()) << written->warning();
  ASSERT_TRUE(fs::exists(dir / "c.octw"));
  for (const auto& e : fs::directory_iterator(dir))  // no partial file left behind
    EXPECT_EQ(e.path().filename(), "c.octw");

  std::string why;
  auto cache = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(cache, nullptr) << why;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto blob = cache->next(sizes[i], "blob " + std::to_string(i));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(blob.get()) % 64, 0u);
    const auto* bytes = static_cast<const uint8_t*>(blob.get());
    for (size_t k = 0; k < sizes[i]; ++k) ASSERT_EQ(bytes[k], i + 1) << "blob " << i << " byte " << k;
  }
  EXPECT_TRUE(cache->all_read());
  cache->release();  // pages dropped: the data must come back from the file
  auto again = WeightCacheFile::open(dir / "c.octw", &why);
  auto b2 = again->next(sizes[0], "blob 0");
  cache.reset();
  EXPECT_EQ(static_cast<const uint8_t*>(b2.get())[99], 1);  // the blob keeps its mapping alive
}

// prefetch() maps a component's pages in once, on a thread of its own; again only after
// release() dropped them (a phase of a run where the weights stay resident does not walk 1–2 GB
// of present pages).
TEST(WeightCache, PrefetchMapsPagesInOnceUntilReleased) {
  const fs::path dir = test::temp_dir("weight_cache_prefetch");
  const std::vector<size_t> sizes{1 << 20, 3 << 20, 12345};
  write_cache(dir / "c.octw", sizes);
  std::string why;
  auto cache = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(cache, nullptr) << why;
  std::vector<std::shared_ptr<void>> blobs;
  for (size_t i = 0; i < sizes.size(); ++i) blobs.push_back(cache->next(sizes[i], "blob " + std::to_string(i)));
  EXPECT_EQ(cache->resident_bytes(), 0u) << "nothing read yet";
  cache->prefetch();
  cache->wait_for_prefetch();
  const uint64_t mapped = cache->resident_bytes();
  EXPECT_GE(mapped, (1u << 20) + (3u << 20) + 12345u);
  EXPECT_EQ(cache->populations(), 1);
  cache->prefetch();  // still mapped: nothing to do
  EXPECT_EQ(cache->populations(), 1);
  EXPECT_EQ(cache->resident_bytes(), mapped);
  cache->release();
  EXPECT_EQ(cache->resident_bytes(), 0u);
  cache->prefetch();  // dropped: mapped in again
  cache->wait_for_prefetch();
  EXPECT_EQ(cache->populations(), 2);
  EXPECT_EQ(cache->resident_bytes(), mapped);
  EXPECT_EQ(static_cast<const uint8_t*>(blobs[1].get())[(3 << 20) - 1], 2);
}

// A prefetch still mapping pages in is stopped, not raced, by release() (nothing stays resident)
// and by the cache's end; the next prefetch maps everything in again. 160 MiB: ten of the
// prefetching thread's 16 MiB ranges, so that the release finds it under way most of the time.
TEST(WeightCache, ReleaseAndDestructionStopAPrefetchUnderWay) {
  const fs::path dir = test::temp_dir("weight_cache_prefetch_stop");
  const std::vector<size_t> sizes{64u << 20, 64u << 20, 32u << 20};
  write_cache(dir / "c.octw", sizes);
  std::string why;
  auto cache = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(cache, nullptr) << why;
  std::vector<std::shared_ptr<void>> blobs;
  for (size_t i = 0; i < sizes.size(); ++i)
    blobs.push_back(cache->next(sizes[i], "blob " + std::to_string(i)));
  for (int round = 0; round < 3; ++round) {
    cache->prefetch();
    cache->release();
    EXPECT_EQ(cache->resident_bytes(), 0u) << "round " << round;
  }
  EXPECT_EQ(cache->populations(), 3);
  cache->prefetch();
  cache->wait_for_prefetch();
  EXPECT_EQ(cache->resident_bytes(), uint64_t{160} << 20);
  EXPECT_EQ(static_cast<const uint8_t*>(blobs[2].get())[(32u << 20) - 1], 3);
  // The last owners go while a prefetch maps pages in: the destructor stops it before unmapping.
  cache->release();
  cache->prefetch();
  blobs.clear();
  cache.reset();
}

TEST(WeightCache, ReadingAnotherSequenceIsAMismatch) {
  const fs::path dir = test::temp_dir("weight_cache_mismatch");
  write_cache(dir / "c.octw", {128, 256});
  std::string why;
  auto cache = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(cache, nullptr) << why;
  EXPECT_THROW(cache->next(128, "something else"), WeightCacheMismatch);
  auto c2 = WeightCacheFile::open(dir / "c.octw", &why);
  c2->next(128, "blob 0");
  EXPECT_THROW(c2->next(255, "blob 1"), WeightCacheMismatch);  // size differs
  auto c3 = WeightCacheFile::open(dir / "c.octw", &why);
  c3->next(128, "blob 0");
  c3->next(256, "blob 1");
  EXPECT_THROW(c3->next(1, "blob 2"), WeightCacheMismatch);  // more asked than stored
}

TEST(WeightCache, DamagedFilesAreRefused) {
  const fs::path dir = test::temp_dir("weight_cache_damaged");
  write_cache(dir / "good.octw", {1000, 2000});
  const auto size = fs::file_size(dir / "good.octw");
  std::string bytes(size, '\0');
  {
    std::ifstream in(dir / "good.octw", std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(size));
  }
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    return dir / name;
  };
  EXPECT_EQ(refusal(dir / "absent.octw"), "no cache yet");
  refusal(write("empty.octw", ""));
  refusal(write("truncated.octw", bytes.substr(0, size - 5)));
  refusal(write("cut_front.octw", bytes.substr(64)));
  std::string bad_magic = bytes;
  bad_magic[size - 1] = 'X';
  refusal(write("bad_magic.octw", bad_magic));
  std::string huge_len = bytes;
  for (int i = 0; i < 8; ++i) huge_len[size - 16 + i] = '\xff';
  refusal(write("huge_table_length.octw", huge_len));
  std::string bad_json = bytes;
  bad_json[size - 17] = '#';  // the table's closing brace
  refusal(write("bad_json.octw", bad_json));
  // A table whose blobs overlap the table itself.
  std::string overlapping = bytes;
  const auto pos = overlapping.find("2000,");
  ASSERT_NE(pos, std::string::npos);
  overlapping.replace(pos, 4, "9000");
  refusal(write("overlapping.octw", overlapping));
}

TEST(WeightCache, FullDiskFallsBackToTheHeap) {
  const fs::path dir = test::temp_dir("weight_cache_full");
  // The file may not grow past 64 MiB: the second 40 MiB blob no longer fits.
  const size_t big = 40u << 20;
  auto cache = WeightCacheFile::create(dir / "c.octw", 64u << 20);
  std::shared_ptr<void> a, b;
  {
    WeightStorageScope scope(cache.get());
    a = allocate_weight_bytes(big, "a");
    std::memset(a.get(), 1, big);  // a blob is filled before the next one is asked for
    b = allocate_weight_bytes(big, "b");
    std::memset(b.get(), 2, big);
  }
  cache->commit();
  std::printf("[weight cache] %s\n", cache->warning().c_str());
  EXPECT_NE(cache->warning().find("no space left"), std::string::npos) << cache->warning();
  EXPECT_FALSE(fs::exists(dir / "c.octw"));
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
  cache->release();  // must not discard a blob the file could not take
  EXPECT_EQ(static_cast<uint8_t*>(a.get())[big - 1], 1);
  EXPECT_EQ(static_cast<uint8_t*>(b.get())[big - 1], 2);
}

TEST(WeightCache, UnwritableFolderFallsBackToTheHeap) {
  const fs::path dir = test::temp_dir("weight_cache_unwritable");
  { std::ofstream(dir / "not_a_dir") << "x"; }
  auto cache = WeightCacheFile::create(dir / "not_a_dir" / "c.octw");
  std::shared_ptr<void> a;
  {
    WeightStorageScope scope(cache.get());
    a = allocate_weight_bytes(1000, "a");
  }
  std::memset(a.get(), 3, 1000);
  cache->commit();
  std::printf("[weight cache] %s\n", cache->warning().c_str());
  EXPECT_FALSE(cache->warning().empty());
}

TEST(WeightCache, PruneRemovesUnusedAndAbandonedFiles) {
  const fs::path dir = test::temp_dir("weight_cache_prune");
  for (const char* n : {"old.octw", "fresh.octw", "x.octw.partial-1-0", "keep.txt"}) std::ofstream(dir / n) << "x";
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(dir / "old.octw", now - std::chrono::hours(24 * 40));
  fs::last_write_time(dir / "x.octw.partial-1-0", now - std::chrono::hours(48));
  fs::last_write_time(dir / "keep.txt", now - std::chrono::hours(24 * 400));
  prune_weight_cache_dir(dir);
  EXPECT_FALSE(fs::exists(dir / "old.octw"));
  EXPECT_FALSE(fs::exists(dir / "x.octw.partial-1-0"));
  EXPECT_TRUE(fs::exists(dir / "fresh.octw"));
  EXPECT_TRUE(fs::exists(dir / "keep.txt"));  // not ours
}

TEST(WeightCache, BlobsStayReadableWhileTheWriterRemapsThem) {
  // The writer thread writes each finished blob and maps the file's pages over it while the
  // model may already be running: a reader checking every blob throughout sees the same bytes.
  const fs::path dir = test::temp_dir("weight_cache_background");
  const size_t bytes = 8u << 20;
  const int blobs = 8;
  auto cache = WeightCacheFile::create(dir / "c.octw");
  std::vector<std::shared_ptr<void>> keep;
  std::atomic<int> visible{0}, mismatches{0}, sweeps{0};
  std::atomic<bool> stop{false};
  keep.reserve(blobs);  // never reallocated while the reader indexes it
  std::thread reader([&] {
    while (!stop) {
      for (int i = 0; i < visible.load(); ++i) {
        const auto* p = static_cast<const uint8_t*>(keep[i].get());
        for (size_t k = 0; k < bytes; k += 4096 - 1)
          if (p[k] != i + 1) ++mismatches;
      }
      ++sweeps;
    }
  });
  {
    WeightStorageScope scope(cache.get());
    for (int i = 0; i < blobs; ++i) {
      keep.push_back(allocate_weight_bytes(bytes, "blob " + std::to_string(i)));
      std::memset(keep.back().get(), i + 1, bytes);
      visible = i + 1;
    }
  }
  cache->commit_in_background();
  cache->wait();
  const int sweeps_before = sweeps.load();
  while (sweeps.load() < sweeps_before + 2) std::this_thread::yield();  // a sweep after the last remap
  stop = true;
  reader.join();
  std::printf("[weight cache] background writer: %d reader sweeps, %d mismatches\n", sweeps.load(), mismatches.load());
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_TRUE(cache->warning().empty()) << cache->warning();
  ASSERT_TRUE(fs::exists(dir / "c.octw"));
  cache->release();  // all blobs are file-backed now: dropping their pages loses nothing
  for (int i = 0; i < blobs; ++i) EXPECT_EQ(static_cast<const uint8_t*>(keep[i].get())[bytes - 1], i + 1);
  std::string why;
  auto read = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(read, nullptr) << why;
  for (int i = 0; i < blobs; ++i)
    EXPECT_EQ(static_cast<const uint8_t*>(read->next(bytes, "blob " + std::to_string(i)).get())[bytes / 2], i + 1);
}

TEST(WeightCache, WaitIsNotStarvedByBusyCores) {
  // The writer runs at idle priority, so with every core busy it hardly runs at all: wait() hands
  // the rest to a writer at normal priority, which writes the blob the idle one was in the middle
  // of again from its start. (Measured on the development VM: 1.8 s, against 8.7 s for the idle
  // writer alone. Only the hand-over is asserted, and that wait() returns at all.)
  const fs::path dir = test::temp_dir("weight_cache_busy");
  const size_t bytes = 64u << 20;
  const int blobs = 4;
  std::atomic<bool> spin{true};
  std::vector<std::thread> busy;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    busy.emplace_back([&] {
      while (spin.load(std::memory_order_relaxed)) {
      }
    });
  auto cache = WeightCacheFile::create(dir / "c.octw");
  std::vector<std::shared_ptr<void>> keep;
  {
    WeightStorageScope scope(cache.get());
    for (int i = 0; i < blobs; ++i) {
      keep.push_back(allocate_weight_bytes(bytes, "blob " + std::to_string(i)));
      std::memset(keep.back().get(), i + 1, bytes);
    }
  }
  cache->commit_in_background();
  uint64_t written_before = 0;
  for (const auto& e : fs::directory_iterator(dir)) written_before += fs::file_size(e.path());
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = std::async(std::launch::async, [&] { cache->wait(); });
  const bool finished = waited.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spin = false;
  for (auto& t : busy) t.join();
  waited.wait();
  std::printf("[weight cache] %u busy threads: %.0f of %d MiB written when wait() began, which took %.2f s\n",
              static_cast<unsigned>(busy.size()), written_before / 1048576.0, blobs * 64, seconds);
  EXPECT_TRUE(finished) << "wait() did not return within 60 s while every core was busy";
  ASSERT_LT(written_before, uint64_t{blobs} * bytes) << "the writer was not behind: the test proves nothing";
  EXPECT_EQ(cache->writers_started(), 2) << "wait() did not hand the rest to a writer at normal priority";
  EXPECT_TRUE(cache->warning().empty()) << cache->warning();
  std::string why;
  auto read = WeightCacheFile::open(dir / "c.octw", &why);
  ASSERT_NE(read, nullptr) << why;
  for (int i = 0; i < blobs; ++i)
    EXPECT_EQ(static_cast<const uint8_t*>(read->next(bytes, "blob " + std::to_string(i)).get())[bytes - 1], i + 1);
}

TEST(WeightCache, DestroyedBeforeCommitLeavesNoFile) {
  // A load that fails (or a model dropped) while its cache is still being written: the writer
  // stops and the partial file goes.
  const fs::path dir = test::temp_dir("weight_cache_abandoned");
  {
    auto cache = WeightCacheFile::create(dir / "c.octw");
    WeightStorageScope scope(cache.get());
    for (int i = 0; i < 6; ++i) std::memset(allocate_weight_bytes(32u << 20, "b").get(), 7, 32u << 20);
  }
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(WeightCache, WorksUnderAnAddressSpaceLimit) {
  // With `ulimit -v` below the 1 TiB the writer first reserves, it reserves less and still
  // writes the cache. In a child process, so that the limit binds nothing else.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit allows";
#else
  const fs::path dir = test::temp_dir("weight_cache_ulimit");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{6ull << 30, 6ull << 30};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(2);
    auto cache = write_cache(dir / "c.octw", {1u << 20, 4096});
    ::_exit(cache->warning().empty() && fs::exists(dir / "c.octw") ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the cache was not written under a 6 GiB address-space limit";
  std::string why;
  EXPECT_NE(WeightCacheFile::open(dir / "c.octw", &why), nullptr) << why;
#endif
}
