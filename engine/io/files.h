// Files: read-only memory maps, and atomic writes (temporary file + rename) with clear errors.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace octodiff {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws octodiff::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Drops the whole pages of [offset, offset + bytes) from this mapping and, when they are at
  // least kDropFromPageCacheBytes, from the page cache (they are re-read from the file if touched
  // again). Loading calls this once a tensor has been converted, so a 4 GB checkpoint never sits
  // in memory next to the converted weights.
  static constexpr uint64_t kDropFromPageCacheBytes = 1ull << 20;
  void release(uint64_t offset, uint64_t bytes) const;

  // Before [offset, offset + bytes) is read through the mapping: an octodiff::Error if the file
  // no longer holds it (cut short since it was opened), where reading those pages would raise
  // SIGBUS, a crash. A file cut after this check still faults: the window is the time the caller
  // takes to read the range.
  void check_still_holds(uint64_t offset, uint64_t bytes) const;

  // Copies [offset, offset + bytes) into `dst` with pread, for data kept beyond the load (packing
  // reads in place: see SafetensorsFile::f32_in_place). Throws octodiff::Error if the file has
  // become shorter or cannot be read.
  void read(uint64_t offset, void* dst, uint64_t bytes) const;

  // Reads the file into the page cache, front to back, on a thread of this file's own, and
  // returns at once; later calls do nothing. Loading calls it for a component it is about to pack
  // (not for one served from the weight cache): a checkpoint that is not in the page cache yet is
  // then read from the disk in order while the loader packs the tensors it already has, instead
  // of piecewise as each is asked for (cold bf16 first loads of SD 1.5 here: 4.6-6.4 s against
  // 6.1-13.2 s). The thread stays at most `lead` bytes past the furthest byte used (read() and
  // note_use()), so that on a machine short of memory it does not evict what it read before the
  // loader gets there.
  static constexpr uint64_t kReadAheadLead = 512ull << 20;
  void read_ahead(uint64_t lead = kReadAheadLead) const;
  // Tells the read-ahead that [0, end) has been used (reads through the mapping, which read()
  // does not see).
  void note_use(uint64_t end) const;
  // How many read_ahead() threads this process has started (tests check when loading reads ahead).
  static uint64_t read_aheads_started();
  // Pages of [offset, offset + bytes) that are in the page cache (mincore); `offset` on a page
  // boundary. 0 if the kernel cannot tell.
  uint64_t resident_pages(uint64_t offset, uint64_t bytes) const;
  // Bytes from the start of the file the read-ahead has brought in (read, or found in the page
  // cache) so far.
  uint64_t read_ahead_progress() const { return read_ahead_done_.load(); }
  // Bytes the read-ahead has read from the file (pages neither in the page cache nor released).
  uint64_t read_ahead_bytes_read() const { return read_ahead_bytes_.load(); }

 private:
  void read_ahead_loop(uint64_t lead) const;

  std::filesystem::path path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  mutable std::once_flag read_ahead_once_;
  mutable std::thread read_ahead_thread_;
  mutable std::atomic<bool> closing_{false};
  mutable std::atomic<uint64_t> used_up_to_{0};
  mutable std::atomic<uint64_t> read_ahead_done_{0};
  mutable std::atomic<uint64_t> read_ahead_bytes_{0};
  // Pages release() has let go: used, so the read-ahead does not read them back in (the loader
  // takes tensors in model order, not file order, so it is often ahead of the read-ahead).
  mutable std::mutex released_mu_;
  mutable std::vector<bool> released_;
};

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path);
std::string read_text_file(const std::filesystem::path& path);

// Writes a file so that it either appears complete or not at all. Write with `write`, then
// `commit()`; destroying an uncommitted AtomicFile removes the temporary file. Every failure
// (full disk, missing folder, permissions) throws octodiff::Error naming the path and reason.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  int fd() const { return fd_; }  // for libraries that want a FILE*/fd; see commit()
  const std::filesystem::path& temp_path() const { return temp_; }
  void commit();

 private:
  std::filesystem::path path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::filesystem::path& path, const void* data, size_t bytes);

// A new folder a command fills file by file (a converted model, a random model): `path` must be
// missing or empty. Unless keep() is called, the destructor removes everything written into it,
// and the folder itself if this made it, so a command that fails part-way (full disk, read-only
// place) leaves nothing half-written behind. Creating the folder throws octodiff::Error naming it.
class OutputFolder {
 public:
  explicit OutputFolder(const std::filesystem::path& path);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  void keep() { keep_ = true; }

 private:
  std::filesystem::path path_;
  bool existed_ = false;
  bool keep_ = false;
};

// Copies a file through an AtomicFile: `to` appears complete or not at all, and a failure names
// the file and the reason.
void copy_file_atomic(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace octodiff
