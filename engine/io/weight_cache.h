// WeightCacheFile: one model component's packed weights in a file, memory-mapped.
//
// Packing a full-size model's weights for the kernels takes seconds, and packed weights kept in
// anonymous memory stay resident for the life of the process. Instead, while a component loads,
// every packed weight (the store core/memory.h's allocate_weight_bytes uses) is written to a file
// and its pages are then mapped from that file, and the finished file is kept as a cache: the
// next load of the same weight files maps it and packs nothing. Because the pages are file-backed, a
// component that is not needed right now can be dropped from memory (release()) — the pipeline
// does so between its phases — and comes back from the page cache on its next use.
//
// Writing happens on a thread of the cache's own, at idle priority until the model's load is over
// (finish_at_normal_priority): a blob the loader has filled (it asks for the next one, or
// commits) is written and remapped from the file while the loader packs the next, and the load
// does not wait for the disk — a first load of a 4 GB model would otherwise be bound by the
// disk's write speed — nor share its cores with the writer. Readers of a blob see the same bytes
// before and after its remap (the kernel swaps the mapping atomically; ThreadSanitizer, which
// treats mmap as a write to the range, reports a reader racing the remap —
// tests/engine/io/weight_cache_test.cpp checks the bytes).
//
// Format: the blobs, each starting on a 4 KiB page, from offset 0; then a JSON table (format name and,
// per blob, offset, size and tag); then the table's length (u64 LE) and the magic "ODWCACHE".
// A cache file is never modified in place: writers fill "<name>.partial-<pid>-<n>" and rename it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace octodiff {

// The stored blob sequence differs from what the loader asks for (a cache written for other
// weights or by another build). The loader discards the cache and packs afresh.
struct WeightCacheMismatch : Error {
  using Error::Error;
};

class WeightCacheFile : public WeightStorage, public std::enable_shared_from_this<WeightCacheFile> {
 public:
  // Writing: blobs go to a partial file next to `final_path`; commit() renames it into place.
  // `capacity_limit` (bytes, 0 = none) makes the file refuse to grow past it, as a full disk
  // would — for tests. When the file cannot take a blob, it and later blobs stay in anonymous
  // memory and the cache is not kept (warning() says why); loading still succeeds.
  static std::shared_ptr<WeightCacheFile> create(const std::filesystem::path& final_path,
                                                 uint64_t capacity_limit = 0);
  // Reading: maps a committed cache file; nullptr, with the reason in *why, when it is missing,
  // truncated or not a cache this build wrote.
  static std::shared_ptr<WeightCacheFile> open(const std::filesystem::path& path, std::string* why);

  ~WeightCacheFile() override;
  WeightCacheFile(const WeightCacheFile&) = delete;
  WeightCacheFile& operator=(const WeightCacheFile&) = delete;

  bool reading() const { return reading_; }
  const std::filesystem::path& path() const { return path_; }

  // Writing: the next blob's storage (WeightStorage).
  std::shared_ptr<void> allocate(size_t bytes, const std::string& tag) override;
  // Writing: no more blobs. The writer thread stores what is left and the blob table, then
  // renames the file into place; any failure (disk full, unwritable folder) leaves no file behind
  // and is reported by warning(). commit() waits for that, commit_in_background() does not.
  void commit();
  void commit_in_background();
  // Writing: the writer runs at idle priority, so as not to slow the packing of the weights
  // that come next; this hands what is left to a writer at normal priority, without waiting for
  // it (the model's load is over: the cache should not wait for idle cores to be finished).
  void finish_at_normal_priority();
  // Writing: waits until a commit_in_background() has finished (at once if none was asked for),
  // at normal priority.
  void wait();

  // Reading: the next stored blob, which must have this size and tag (else WeightCacheMismatch).
  std::shared_ptr<void> next(size_t bytes, const std::string& tag);
  bool all_read() const { return cursor_ == blobs_.size(); }

  // Drops this component's resident pages (the data stays in the file and the page cache).
  // While writing: only the blobs the writer has already remapped from the file.
  void release() const;
  // Maps the pages back in ahead of use, a range at a time rather than one page fault at a time,
  // on a thread of its own and in file order (the order the loader packed the layers, i.e. the
  // order a forward pass reads them), and returns at once: the network starts computing while its
  // later layers are still coming from the disk (a cold start: the SD-Turbo UNet's 1.8 GB took
  // 1.0–1.3 s to read here before its first layer could run). A layer the thread has not reached
  // yet faults in when read, as without prefetching. Once mapped in, again only after a release()
  // (or when the writer has remapped more blobs): walking 1–2 GB of present pages costs ~30 ms a
  // network, every phase of every run where the weights stay resident. Pages the kernel reclaimed
  // meanwhile fault back in when read.
  void prefetch() const;
  // Waits for the prefetch() in flight, if any, to have mapped everything in (tests, benchmarks).
  void wait_for_prefetch() const;
  // How many prefetch() calls mapped pages in (tests).
  int populations() const { return populations_.load(); }
  // Bytes of this component's blobs mapped into the process now (pages present in its page
  // table, /proc/self/pagemap: what counts in RSS; pages only in the page cache do not).
  uint64_t resident_bytes() const;

  std::string warning() const;
  // Writer threads started so far: 1, or 2 once finish_at_normal_priority() (or wait()) has taken
  // over from the idle one (tests).
  int writers_started() const;
  uint64_t file_bytes() const { return used_; }

 private:
  struct Blob {
    uint64_t offset = 0, bytes = 0;
    std::string tag;
  };
  WeightCacheFile() = default;
  void give_up(const std::string& why);
  void hand_over(bool finishing);  // writing: every blob so far is filled; starts the writer
  void writer_loop(bool idle);
  // On the writer thread; a failure gives up the file. False when stopped (cancel_, or hurry_ for
  // the idle writer) before the blob was written.
  bool write_blob(const Blob& b, bool idle);
  void finish_file();
  void stop_prefetch_locked() const;  // under prefetch_mu_: stops and joins the prefetch() thread

  bool reading_ = false;
  std::filesystem::path path_, partial_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t reserved_ = 0;  // address space reserved at base_
  uint64_t used_ = 0;      // blob bytes
  std::atomic<uint64_t> file_backed_{0};  // writing: blobs below this offset are mapped from the file
  mutable std::atomic<uint64_t> populated_{0};  // bytes the last prefetch() maps in (0: released since)
  mutable std::atomic<int> populations_{0};
  // The prefetch() thread, started and stopped under prefetch_mu_ (release() and the destructor
  // stop it, stop_prefetch_locked(), before they unmap anything).
  mutable std::mutex prefetch_mu_;
  mutable std::thread prefetcher_;
  mutable std::atomic<bool> stop_prefetch_{false};
  uint64_t capacity_limit_ = 0;
  std::atomic<bool> failed_{false};  // writing gave up on the file (the blobs stay in memory)
  std::atomic<bool> committed_{false};
  std::vector<Blob> blobs_;
  size_t cursor_ = 0;

  // The writer thread and what it shares with the loader, under mu_.
  mutable std::mutex mu_;
  std::mutex wait_mu_;  // one finish_at_normal_priority() at a time: it replaces writer_
  std::condition_variable cv_;
  std::thread writer_;
  size_t filled_ = 0;       // blobs the loader has finished
  size_t next_blob_ = 0;    // the next blob to write
  bool hurry_ = false;      // finish_at_normal_priority(): the idle writer is to stop between chunks
  int writers_started_ = 0; // the first runs at idle priority, a second (if any) at normal
  bool finishing_ = false;  // commit asked for: after the filled blobs, the table and rename
  bool cancel_ = false;     // destruction: stop writing, leave no file
  bool done_ = false;       // the writer has finished (committed or given up)
  std::string warning_;
};

// While alive, the layers' loaders (models/layers.h) take their packed weights from `cache` when it
// is reading, and pack into it when it is writing.
class WeightCacheScope {
 public:
  explicit WeightCacheScope(std::shared_ptr<WeightCacheFile> cache);
  ~WeightCacheScope();
  WeightCacheScope(const WeightCacheScope&) = delete;
  WeightCacheScope& operator=(const WeightCacheScope&) = delete;

 private:
  WeightCacheFile* previous_;
  std::unique_ptr<WeightStorageScope> storage_;
};

// Removes cache files of `dir` not used for `max_age_days` (open() refreshes a file's modification
// time) and partial files abandoned by crashed writers (older than a day). Best effort, silent.
void prune_weight_cache_dir(const std::filesystem::path& dir, int max_age_days = 30);

// The cache a WeightCacheScope installed on this thread, or nullptr.
WeightCacheFile* active_weight_cache();

}  // namespace octodiff
