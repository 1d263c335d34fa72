#include "io/weight_cache.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <nlohmann/json.hpp>

namespace octodiff {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'O', 'D', 'W', 'C', 'A', 'C', 'H', 'E'};
constexpr const char* kFormat = "octodiff-weight-cache-2";
constexpr uint64_t kAlign = 4096;  // blobs start on pages: each is remapped on its own
constexpr uint64_t kReserve = 1ull << 40;    // address space for a file being written (no memory)
constexpr uint64_t kMinReserve = 1ull << 30;  // the last try: 1 GiB
constexpr uint64_t kMaxTable = 64ull << 20;

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and we fault on demand
#endif

thread_local WeightCacheFile* t_cache = nullptr;
std::atomic<unsigned> g_partial_counter{0};

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

std::shared_ptr<WeightCacheFile> WeightCacheFile::create(const fs::path& final_path, uint64_t capacity_limit) {
  std::shared_ptr<WeightCacheFile> c(new WeightCacheFile());
  c->path_ = final_path;
  c->capacity_limit_ = capacity_limit;
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  c->partial_ = final_path;
  c->partial_ += cat(".partial-", ::getpid(), "-", g_partial_counter++);
  c->fd_ = ::open(c->partial_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (c->fd_ < 0) {
    c->give_up(cat("cannot create '", c->partial_.string(), "': ", errno_text(errno)));
    return c;
  }
  // Less address space where 1 TiB is refused (a `ulimit -v`, sanitizers' shadow memory): a
  // component larger than what was reserved is then not cached, nothing else changes.
  for (uint64_t reserve = kReserve; reserve >= kMinReserve; reserve /= 4) {
    void* p = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      c->base_ = static_cast<uint8_t*>(p);
      c->reserved_ = reserve;
      return c;
    }
  }
  c->give_up(cat("cannot reserve address space: ", errno_text(errno)));
  return c;
}

std::shared_ptr<WeightCacheFile> WeightCacheFile::open(const fs::path& path, std::string* why) {
  auto reject = [&](const std::string& reason) -> std::shared_ptr<WeightCacheFile> {
    if (why) *why = reason;
    return nullptr;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return reject(errno == ENOENT ? "no cache yet" : cat("cannot open: ", errno_text(errno)));
  std::shared_ptr<WeightCacheFile> c(new WeightCacheFile());
  c->fd_ = fd;
  c->reading_ = true;
  c->path_ = path;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return reject("cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 16) return reject("truncated");
  uint8_t tail[16];
  if (::pread(fd, tail, 16, static_cast<off_t>(size - 16)) != 16) return reject("cannot read");
  if (std::memcmp(tail + 8, kMagic, 8) != 0) return reject("not a weight cache (bad magic)");
  uint64_t table_len = 0;
  for (int i = 7; i >= 0; --i) table_len = (table_len << 8) | tail[i];
  if (table_len > kMaxTable || table_len > size - 16) return reject("damaged (table length)");
  const uint64_t data_end = size - 16 - table_len;
  std::string table(table_len, '\0');
  if (::pread(fd, table.data(), table_len, static_cast<off_t>(data_end)) != static_cast<ssize_t>(table_len))
    return reject("cannot read the table");
  try {
    nlohmann::json j = nlohmann::json::parse(table);
    if (j.value("format", "") != kFormat) return reject("written by another version");
    uint64_t expect = 0;
    for (const auto& b : j.at("blobs")) {
      Blob blob{b.at(0).get<uint64_t>(), b.at(1).get<uint64_t>(), b.at(2).get<std::string>()};
      // Blobs are contiguous up to alignment and inside the data region (checked without overflow).
      if (blob.offset != round_up(expect, kAlign) || blob.bytes > data_end || blob.offset > data_end - blob.bytes)
        return reject("damaged (blob table)");
      expect = blob.offset + blob.bytes;
      c->blobs_.push_back(std::move(blob));
    }
    if (j.at("data_bytes").get<uint64_t>() != data_end || expect > data_end) return reject("damaged (data size)");
  } catch (const std::exception&) {
    return reject("damaged (table is not valid JSON)");
  }
  c->used_ = data_end;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // "used now", for prune_weight_cache_dir
  if (data_end > 0) {
    void* p = ::mmap(nullptr, data_end, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return reject(cat("cannot map: ", errno_text(errno)));
    c->base_ = static_cast<uint8_t*>(p);
    c->reserved_ = data_end;
  }
  return c;
}

WeightCacheFile::~WeightCacheFile() {
  {
    std::lock_guard<std::mutex> lock(prefetch_mu_);
    stop_prefetch_locked();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (base_) ::munmap(base_, reserved_);
  if (fd_ >= 0) ::close(fd_);
  if (!reading_ && !committed_ && !partial_.empty()) ::unlink(partial_.c_str());
}

void WeightCacheFile::give_up(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_) warning_ = "weight cache not kept: " + why;
  failed_ = true;
}

int WeightCacheFile::writers_started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writers_started_;
}

std::string WeightCacheFile::warning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warning_;
}

// A blob is filled in anonymous pages placed where it will live. Once filled, the writer thread
// writes it to the file with pwrite — a full disk is then an error code, never the SIGBUS that
// writing through a file mapping would raise — and maps the file's pages over it, which frees the
// anonymous ones. Mapping fresh file pages for writing instead would make the kernel zero-fill
// them through readahead first.
std::shared_ptr<void> WeightCacheFile::allocate(size_t bytes, const std::string& tag) {
  if (reading_) fail("internal: weight cache '", path_.string(), "' is open for reading");
  if (bytes == 0) bytes = 1;
  const uint64_t offset = round_up(used_, kAlign);
  hand_over(/*finishing=*/false);  // the previous blob is complete
  if (capacity_limit_ && offset + bytes > capacity_limit_)
    give_up(cat("no space left on the device holding '", path_.parent_path().string(), "'"));
  if (base_ && offset + bytes <= reserved_) {
    void* p = ::mmap(base_ + offset, round_up(bytes, 4096), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED) {
      // Huge pages where the blob spans them: the writer's copy out of them runs faster (fewer
      // TLB misses), so it keeps up with the packing and the anonymous copies are freed sooner.
      if (bytes >= (2u << 20)) ::madvise(p, round_up(bytes, 4096), MADV_HUGEPAGE);
      std::lock_guard<std::mutex> lock(mu_);
      used_ = offset + bytes;
      blobs_.push_back({offset, bytes, tag});
      return std::shared_ptr<void>(shared_from_this(), p);  // keeps the mapping alive; zeroed
    }
    give_up(cat("cannot map memory: ", errno_text(errno)));
  } else if (base_) {
    give_up("component larger than the reserved address space");
  }
  void* p = aligned_alloc_or_throw(bytes);
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, [](void* q) { aligned_free(q); });
}

void WeightCacheFile::hand_over(bool finishing) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    filled_ = blobs_.size();
    finishing_ = finishing_ || finishing;
    if (!writer_.joinable() && fd_ >= 0 && base_ && (finishing_ || filled_ > 0)) {
      writer_ = std::thread([this] { writer_loop(/*idle=*/true); });
      ++writers_started_;
    }
  }
  cv_.notify_all();
}

// The first writer runs at idle priority: on a 2-core machine it took a third of the CPU from the
// two threads packing the weights, and it catches up in the moments they leave (measured: a full
// SD 1.5 cache was complete within 0.5 s of the load's end). An unprivileged thread may not raise
// its priority again, so once the load is over (finish_at_normal_priority, wait()) the idle
// writer stops between two chunks and a writer at normal priority takes over; starved by busy
// cores, the idle one would keep a waiter waiting, and its unwritten blobs in anonymous memory.
void WeightCacheFile::writer_loop(bool idle) {
  if (idle) {
    sched_param p{};
    ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &p);  // best effort
  }
  for (;;) {
    Blob blob;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return cancel_ || (idle && hurry_) || next_blob_ < filled_ || finishing_; });
      if (cancel_) break;
      if (idle && hurry_) return;  // finish_at_normal_priority() takes over: not done_
      if (next_blob_ == filled_) {  // finishing, with every blob written
        lock.unlock();
        finish_file();
        break;
      }
      blob = blobs_[next_blob_];
    }
    if (!failed_ && !write_blob(blob, idle)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_) break;
      return;  // hurried: the next writer writes this blob again, from its start
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++next_blob_;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

bool WeightCacheFile::write_blob(const Blob& b, bool idle) {
  // Between chunks a destruction or a wait() can stop the writer: small, since at idle priority
  // next to busy threads a chunk takes up to hundreds of times its run time.
  constexpr uint64_t kChunk = 2ull << 20;
  uint64_t done = 0;
  while (done < b.bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_ || (idle && hurry_)) return false;
    }
    const uint64_t n_want = std::min(kChunk, b.bytes - done);
    const ssize_t n = ::pwrite(fd_, base_ + b.offset + done, n_want, static_cast<off_t>(b.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      give_up(cat("cannot write '", partial_.string(), "': ", errno_text(n < 0 ? errno : ENOSPC)));
      return true;
    }
    done += static_cast<uint64_t>(n);
  }
  void* p = ::mmap(base_ + b.offset, round_up(b.bytes, 4096), PROT_READ, MAP_SHARED | MAP_FIXED, fd_,
                   static_cast<off_t>(b.offset));
  if (p == MAP_FAILED) {
    // The anonymous pages at that address are untouched by a failed MAP_FIXED: the blob is intact.
    give_up(cat("cannot map '", partial_.string(), "': ", errno_text(errno)));
    return true;
  }
  file_backed_ = round_up(b.offset + b.bytes, 4096);
  return true;
}

void WeightCacheFile::commit() {
  commit_in_background();
  wait();
}

void WeightCacheFile::commit_in_background() {
  if (reading_) return;
  hand_over(/*finishing=*/true);
  // Nothing to hand to a writer (no file could be created): only the partial name to forget.
  if (!writer_.joinable() && fd_ >= 0) ::unlink(partial_.c_str());
}

void WeightCacheFile::finish_at_normal_priority() {
  if (reading_) return;
  const std::lock_guard<std::mutex> one_at_a_time(wait_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  if (!writer_.joinable() || writers_started_ != 1 || done_) return;  // no idle writer at work
  hurry_ = true;
  cv_.notify_all();
  lock.unlock();
  writer_.join();
  lock.lock();
  if (!done_) {
    writer_ = std::thread([this] { writer_loop(/*idle=*/false); });
    ++writers_started_;
  }
}

void WeightCacheFile::wait() {
  finish_at_normal_priority();
  const std::lock_guard<std::mutex> one_at_a_time(wait_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !writer_.joinable() || done_; });
}

// On the writer thread, after the last blob: the table, then the rename. No file is left behind
// when anything failed.
void WeightCacheFile::finish_file() {
  if (failed_) {
    ::unlink(partial_.c_str());
    return;
  }
  nlohmann::json j;
  j["format"] = kFormat;
  {
    std::lock_guard<std::mutex> lock(mu_);
    j["data_bytes"] = used_;
    j["blobs"] = nlohmann::json::array();
    for (const Blob& b : blobs_) j["blobs"].push_back({b.offset, b.bytes, b.tag});
  }
  std::string table = j.dump();
  uint8_t tail[16];
  for (int i = 0; i < 8; ++i) tail[i] = static_cast<uint8_t>(static_cast<uint64_t>(table.size()) >> (8 * i));
  std::memcpy(tail + 8, kMagic, 8);
  table.append(reinterpret_cast<const char*>(tail), 16);
  // The table goes after the blobs, inside space already reserved when it fits, else appended.
  const uint64_t end = used_ + table.size();
  if (capacity_limit_ && end > capacity_limit_) {
    give_up(cat("no space left on the device holding '", path_.parent_path().string(), "'"));
    ::unlink(partial_.c_str());
    return;
  }
  uint64_t written = 0;
  while (written < table.size()) {
    const ssize_t n = ::pwrite(fd_, table.data() + written, table.size() - written, static_cast<off_t>(used_ + written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      give_up(cat("cannot write '", partial_.string(), "': ", errno_text(n < 0 ? errno : ENOSPC)));
      ::unlink(partial_.c_str());
      return;
    }
    written += static_cast<uint64_t>(n);
  }
  if (::ftruncate(fd_, static_cast<off_t>(end)) != 0 || ::rename(partial_.c_str(), path_.c_str()) != 0) {
    give_up(cat("cannot finish '", path_.string(), "': ", errno_text(errno)));
    ::unlink(partial_.c_str());
    return;
  }
  committed_ = true;
}

std::shared_ptr<void> WeightCacheFile::next(size_t bytes, const std::string& tag) {
  if (!reading_) fail("internal: weight cache '", path_.string(), "' is being written");
  if (cursor_ >= blobs_.size())
    throw WeightCacheMismatch(cat("weight cache '", path_.string(), "' has fewer weights than the model"));
  const Blob& b = blobs_[cursor_];
  if (b.bytes != bytes || b.tag != tag)
    throw WeightCacheMismatch(cat("weight cache '", path_.string(), "': weight ", cursor_ + 1, " is '", b.tag,
                                  "', the model asks for '", tag, "'"));
  ++cursor_;
  return std::shared_ptr<void>(shared_from_this(), base_ + b.offset);
}

void WeightCacheFile::release() const {
  std::lock_guard<std::mutex> lock(prefetch_mu_);
  stop_prefetch_locked();
  // Only file-backed pages: on anonymous ones (a blob kept in memory after the file could not
  // take it, or not written yet) MADV_DONTNEED would discard the data.
  const uint64_t bytes = reading_ ? round_up(used_, 4096) : file_backed_.load();
  if (base_ && bytes) ::madvise(base_, std::min(bytes, reserved_), MADV_DONTNEED);
  populated_ = 0;
}

namespace {

// Maps [base, base + bytes) in, 16 MiB at a time from the start, until `stop`. Where the kernel
// cannot populate (before Linux 5.14), asks it to read the rest ahead instead. A stop waits for
// the range under way: 16 MiB keeps that short on a slow disk (0.16 s at 100 MB/s), for the
// app's thread that drops a model it is replacing.
void populate_in_order(uint8_t* base, uint64_t bytes, const std::atomic<bool>& stop) {
  constexpr uint64_t kRange = 16ull << 20;  // a multiple of the page size
  for (uint64_t at = 0; at < bytes && !stop.load(std::memory_order_relaxed); at += kRange) {
    if (::madvise(base + at, std::min(kRange, bytes - at), MADV_POPULATE_READ) != 0) {
      ::madvise(base + at, bytes - at, MADV_WILLNEED);
      return;
    }
  }
}

}  // namespace

void WeightCacheFile::prefetch() const {
  std::lock_guard<std::mutex> lock(prefetch_mu_);
  const uint64_t bytes = std::min(reading_ ? round_up(used_, 4096) : file_backed_.load(), reserved_);
  if (!base_ || !bytes || populated_.load() == bytes) return;
  stop_prefetch_locked();  // one still mapping a shorter range (the writer has remapped more since)
  populated_ = bytes;
  ++populations_;
  try {
    prefetcher_ = std::thread([this, bytes] { populate_in_order(base_, bytes, stop_prefetch_); });
  } catch (const std::system_error&) {  // no thread to spare: map them in now
    populate_in_order(base_, bytes, stop_prefetch_);
  }
}

void WeightCacheFile::wait_for_prefetch() const {
  std::lock_guard<std::mutex> lock(prefetch_mu_);
  if (prefetcher_.joinable()) prefetcher_.join();
}

void WeightCacheFile::stop_prefetch_locked() const {
  if (!prefetcher_.joinable()) return;
  stop_prefetch_ = true;
  prefetcher_.join();
  stop_prefetch_ = false;
}

uint64_t WeightCacheFile::resident_bytes() const {
  const uint64_t bytes = std::min(round_up(used_, 4096), reserved_);
  if (!base_ || !bytes) return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<uint64_t> entries((bytes + page - 1) / page);
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(base_) / page * sizeof(uint64_t));
  const ssize_t got = ::pread(fd, entries.data(), entries.size() * sizeof(uint64_t), at);
  ::close(fd);
  if (got != static_cast<ssize_t>(entries.size() * sizeof(uint64_t))) return 0;
  uint64_t present = 0;
  for (uint64_t e : entries) present += e >> 63;  // bit 63: page present
  return present * page;
}

void prune_weight_cache_dir(const fs::path& dir, int max_age_days) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool partial = name.find(".octw.partial-") != std::string::npos;
    if (!partial && e.path().extension() != ".octw") continue;
    const auto age = now - e.last_write_time(ec);
    if (ec) continue;
    if (age > std::chrono::hours(partial ? 24 : 24 * max_age_days)) fs::remove(e.path(), ec);
  }
}

WeightCacheScope::WeightCacheScope(std::shared_ptr<WeightCacheFile> cache) : previous_(t_cache) {
  t_cache = cache.get();
  if (cache && !cache->reading()) storage_ = std::make_unique<WeightStorageScope>(cache.get());
}

WeightCacheScope::~WeightCacheScope() {
  storage_.reset();
  t_cache = previous_;
}

WeightCacheFile* active_weight_cache() { return t_cache; }

}  // namespace octodiff
