// What the fuzz targets share: the input as a file (an in-memory memfd, reached through
// /proc/self/fd, so the readers' mmap and size checks run as on a real file) and the input cut
// into parts.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace octodiff::fuzz {

// The bytes as a file; closed (and gone) when this goes.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size, const char* name = "fuzz-input") {
    fd_ = memfd_create(name, 0);
    if (fd_ < 0) { std::perror("memfd_create"); std::abort(); }
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) { std::perror("write"); std::abort(); }
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

// The input cut at each "\n@@\n" into at most `parts` pieces (missing ones are empty).
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t parts) {
  std::vector<std::string> out;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (out.size() + 1 < parts) {
    const size_t at = rest.find("\n@@\n");
    if (at == std::string_view::npos) break;
    out.emplace_back(rest.substr(0, at));
    rest.remove_prefix(at + 4);
  }
  out.emplace_back(rest);
  out.resize(parts);
  return out;
}

// A folder under /dev/shm (else the temp dir) for targets whose reader takes a folder; one per
// process, emptied by each call of write_file's caller.
inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("octodiff-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace octodiff::fuzz
