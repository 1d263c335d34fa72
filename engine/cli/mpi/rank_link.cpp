#include "mpi/rank_link.h"

#include <sys/socket.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace octodiff::cli::mpi {
namespace {

constexpr uint64_t kMaxPayload = uint64_t{1} << 40;  // a sanity bound, far above any result

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // closed (0) or broken
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

template <typename T>
void append_number(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads the numbers and byte strings of a payload, refusing to run past its end.
struct PayloadReader {
  const std::string& bytes;
  size_t at = 0;
  template <typename T>
  bool number(T* value) {
    if (bytes.size() - at < sizeof(T)) return false;
    std::memcpy(value, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool text(uint64_t size, std::string* out) {
    if (bytes.size() - at < size) return false;
    out->assign(bytes, at, size);
    at += size;
    return true;
  }
};

std::optional<Frame> parse_payload(const std::string& payload) {
  PayloadReader in{payload};
  uint32_t head_size = 0, blob_count = 0;
  std::string head;
  if (!in.number(&head_size) || !in.text(head_size, &head) || !in.number(&blob_count)) return std::nullopt;
  Frame frame;
  frame.head = nlohmann::json::parse(head, nullptr, false);
  if (frame.head.is_discarded() || !frame.head.is_object()) return std::nullopt;
  frame.blobs.resize(blob_count);
  for (std::string& blob : frame.blobs) {
    uint64_t size = 0;
    if (!in.number(&size) || !in.text(size, &blob)) return std::nullopt;
  }
  if (in.at != payload.size()) return std::nullopt;
  return frame;
}

}  // namespace

bool write_frame(int fd, const nlohmann::json& head, const std::vector<std::string_view>& blobs) {
  const std::string head_text = head.dump();
  std::string payload;
  size_t size = 4 + head_text.size() + 4;  // the payload, after its own size
  for (std::string_view b : blobs) size += 8 + b.size();
  payload.reserve(8 + size);
  append_number(payload, static_cast<uint64_t>(size));
  append_number(payload, static_cast<uint32_t>(head_text.size()));
  payload += head_text;
  append_number(payload, static_cast<uint32_t>(blobs.size()));
  for (std::string_view b : blobs) {
    append_number(payload, static_cast<uint64_t>(b.size()));
    payload.append(b.data(), b.size());
  }
  return write_all(fd, payload.data(), payload.size());
}

std::optional<Frame> read_frame(int fd) {
  uint64_t size = 0;
  if (!read_all(fd, reinterpret_cast<char*>(&size), sizeof size) || size > kMaxPayload) return std::nullopt;
  std::string payload(size, '\0');
  if (!read_all(fd, payload.data(), payload.size())) return std::nullopt;
  return parse_payload(payload);
}

std::string describe_process_end(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    if (sig == SIGKILL) return cat("killed (signal 9), possibly by the out-of-memory killer");
    return cat("signal ", sig, " (", name ? name : "unknown signal", ")");
  }
  if (WIFEXITED(status)) return cat("exited with code ", WEXITSTATUS(status));
  return "ended in an unknown way";
}

}  // namespace octodiff::cli::mpi
