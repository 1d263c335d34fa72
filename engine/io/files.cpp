#include "io/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace octodiff {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '", path.string(), "': ", errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot read '", path.string(), "': ", errno_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'", path.string(), "' is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("cannot map '", path.string(), "': ", errno_text(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  fd_ = fd;
}

void MappedFile::read(uint64_t offset, void* dst, uint64_t bytes) const {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, static_cast<uint8_t*>(dst) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read '", path_.string(), "': ", errno_text(errno));
    if (n == 0) fail("cannot read '", path_.string(), "': the file ends early (was it truncated while loading?)");
    done += static_cast<uint64_t>(n);
  }
  note_use(offset + bytes);
}

void MappedFile::check_still_holds(uint64_t offset, uint64_t bytes) const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot read '", path_.string(), "': ", errno_text(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset > size || bytes > size - offset)
    fail("cannot read '", path_.string(), "': the file ends early (was it truncated while loading?)");
}

void MappedFile::release(uint64_t offset, uint64_t bytes) const {
  if (!data_ || bytes == 0 || offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range: neighbours may still be needed.
  const uint64_t begin = (offset + page - 1) / page * page;
  const uint64_t end = std::min(offset + bytes, size_) / page * page;
  if (end <= begin) return;
  {
    const std::lock_guard<std::mutex> lock(released_mu_);
    if (released_.empty()) released_.resize((size_ + page - 1) / page);
    std::fill(released_.begin() + static_cast<int64_t>(begin / page),
              released_.begin() + static_cast<int64_t>(end / page), true);
  }
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
  // Unmapping leaves the pages in the page cache. A large tensor's are dropped from it too, which
  // frees them at once, while the load still needs memory for the packed weights: those
  // allocations then reuse these pages instead of asking for fresh ones (on a VM whose host backs
  // new guest memory on first touch, that was much of a first load's time; see
  // bench/results/README.md). Small tensors — biases and norms, which a load from the weight cache
  // still reads from the checkpoint — stay cached for the next load. Dirty pages stay.
  if (end - begin >= kDropFromPageCacheBytes)
    ::posix_fadvise(fd_, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_DONTNEED);
}

namespace {
std::atomic<uint64_t> g_read_aheads_started{0};
}  // namespace

uint64_t MappedFile::read_aheads_started() { return g_read_aheads_started.load(); }

void MappedFile::note_use(uint64_t end) const {
  uint64_t seen = used_up_to_.load();
  while (end > seen && !used_up_to_.compare_exchange_weak(seen, end)) {
  }
}

void MappedFile::read_ahead(uint64_t lead) const {
  std::call_once(read_ahead_once_, [this, lead] {
    if (size_ == 0) return;
    try {
      read_ahead_thread_ = std::thread([this, lead] { read_ahead_loop(lead); });
      ++g_read_aheads_started;
    } catch (const std::system_error&) {
      // No thread to spare: the loader reads the file itself, only more slowly from a cold disk.
    }
  });
}

uint64_t MappedFile::resident_pages(uint64_t offset, uint64_t bytes) const {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!data_ || bytes == 0) return 0;
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  if (::mincore(const_cast<uint8_t*>(data_) + offset, bytes, in_core.data()) != 0) return 0;
  return static_cast<uint64_t>(std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; }));
}

void MappedFile::read_ahead_loop(uint64_t lead) const {
  // Plain reads, which wait for the disk, so that the thread stays just ahead of the loader
  // (readahead(2) only queues the I/O, and measured cold loads gained little from it). Pages
  // already in the page cache are skipped, so a warm file costs no copies, and so are released
  // ones: the loader, going in model order, has often used and dropped them before the read-ahead
  // gets there, and reading them back in cost cold SD 1.5 loads 1.4-3 s.
  constexpr uint64_t kStep = 4ull << 20;  // a multiple of the page size
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), step_pages = kStep / page;
  std::vector<uint8_t> buf(kStep);
  std::vector<unsigned char> in_core(step_pages);
  for (uint64_t off = 0; off < size_ && !closing_; off += kStep) {
    while (off >= used_up_to_.load() + lead && !closing_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (closing_) break;
    const uint64_t n = std::min(kStep, size_ - off), pages = (n + page - 1) / page;
    if (::mincore(const_cast<uint8_t*>(data_) + off, n, in_core.data()) != 0)
      std::fill(in_core.begin(), in_core.end(), 0);
    {
      const std::lock_guard<std::mutex> lock(released_mu_);
      for (uint64_t i = 0; i < pages && !released_.empty(); ++i)
        if (released_[off / page + i]) in_core[i] |= 1;
    }
    // Runs of pages still to read.
    bool failed = false;
    for (uint64_t i = 0; i < pages && !failed;) {
      if (in_core[i] & 1) {
        ++i;
        continue;
      }
      uint64_t j = i;
      while (j < pages && !(in_core[j] & 1)) ++j;
      const uint64_t from = i * page, bytes = std::min(j * page, n) - from;
      failed = ::pread(fd_, buf.data(), bytes, static_cast<off_t>(off + from)) != static_cast<ssize_t>(bytes);
      read_ahead_bytes_ += bytes;
      i = j;
    }
    if (failed) break;  // errors: the loader reports them
    read_ahead_done_ = off + n;
  }
}

MappedFile::~MappedFile() {
  closing_ = true;
  if (read_ahead_thread_.joinable()) read_ahead_thread_.join();
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '", path.string(), "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("cannot read '", path.string(), "'");
  return bytes;
}

std::string read_text_file(const std::filesystem::path& path) {
  auto bytes = read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

AtomicFile::AtomicFile(const std::filesystem::path& path) : path_(path) {
  static std::atomic<unsigned> counter{0};
  std::ostringstream name;
  name << "." << path.filename().string() << ".tmp-" << ::getpid() << "-" << counter++;
  temp_ = path.parent_path() / name.str();
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot write '", path.string(), "': ", errno_text(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write '", path_.string(), "': ", errno_text(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot write '", path_.string(), "': ", errno_text(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("cannot write '", path_.string(), "': ", errno_text(errno));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    fail("cannot write '", path_.string(), "': ", errno_text(errno));
  committed_ = true;
}

void write_file_atomic(const std::filesystem::path& path, const void* data, size_t bytes) {
  AtomicFile f(path);
  f.write(data, bytes);
  f.commit();
}

OutputFolder::OutputFolder(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  existed_ = std::filesystem::exists(path, ec);
  std::filesystem::create_directories(path, ec);
  if (ec) fail("cannot write '", path.string(), "': ", ec.message());
}

OutputFolder::~OutputFolder() {
  if (keep_) return;
  std::error_code ec;
  if (!existed_) {
    std::filesystem::remove_all(path_, ec);
    return;
  }
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(path_, ec)) entries.push_back(e.path());
  for (const auto& e : entries) std::filesystem::remove_all(e, ec);
}

void copy_file_atomic(const std::filesystem::path& from, const std::filesystem::path& to) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("cannot open '", from.string(), "': ", errno_text(errno));
  AtomicFile out(to);
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(in.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read '", from.string(), "': ", errno_text(errno));
    if (n == 0) break;
    out.write(buffer.data(), static_cast<size_t>(n));
  }
  out.commit();
}

}  // namespace octodiff
