// Files: read-only memory maps, and atomic writes (temporary file + rename) with clear errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <string>
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

  // Lets the kernel drop the pages of [offset, offset + bytes) from memory (they are re-read from
  // the file if touched again). Loading calls this once a tensor has been converted, so a 4 GB
  // checkpoint never sits in memory next to the converted weights.
  void release(uint64_t offset, uint64_t bytes) const;

  // Copies [offset, offset + bytes) into `dst` with pread: no page faults on the mapping, which
  // on a first load of a multi-GB checkpoint cost more than the copy itself. Throws
  // octodiff::Error if the file has become shorter or cannot be read.
  void read(uint64_t offset, void* dst, uint64_t bytes) const;

  // Reads the whole file into the page cache, front to back, on a thread of this file's own, and
  // returns at once; later calls do nothing. Loading calls it on its first access to tensor data
  // (a load served from the weight cache reads no checkpoint at all): a checkpoint that is not in
  // the page cache yet is then read from the disk in order while the loader packs the tensors it
  // already has, instead of piecewise as each is asked for (cold bf16 first loads of SD 1.5 here:
  // 4.6-6.4 s against 6.3-9.6 s).
  void read_ahead() const;
  // How many read_ahead() threads this process has started (tests check when loading reads ahead).
  static uint64_t read_aheads_started();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void read_ahead_loop() const;
  mutable std::once_flag read_ahead_once_;
  mutable std::thread read_ahead_thread_;
  mutable std::atomic<bool> closing_{false};
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

}  // namespace octodiff
