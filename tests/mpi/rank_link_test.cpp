// The link between a rank's MPI process and its compute process (cli/mpi/rank_link.h): frames
// come through whole and byte-exact; a truncated, oversized or garbled frame and a closed peer
// read as "gone" (nullopt), never as a frame; writing to a gone peer is false, not SIGPIPE; and a
// process's end is described the way rank 0 prints it.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <string>
#include <thread>

#include "mpi/rank_link.h"

using namespace octodiff::cli::mpi;

namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
};

void write_raw(int fd, const std::string& bytes) { ASSERT_EQ(write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size())); }

template <typename T>
std::string raw(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

// How `fn` ends in a child process, as waitpid tells it.
template <typename Fn>
int status_of_child(Fn fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_DUMPABLE, 0);  // no core file
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(RankLink, FramesComeThroughWholeAndByteExact) {
  Pair p;
  std::string tensor(3 << 20, '\0');  // 3 MiB, every byte value, larger than the socket buffer
  for (size_t i = 0; i < tensor.size(); ++i) tensor[i] = static_cast<char>(i * 7919 % 256);
  const std::string text = "{\"type\":\"result\"}";
  std::thread writer([&] { EXPECT_TRUE(write_frame(p.a, {{"op", "send_result"}, {"to", 2}}, {text, tensor, ""})); });
  const std::optional<Frame> f = read_frame(p.b);
  writer.join();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->head["op"], "send_result");
  EXPECT_EQ(f->head["to"], 2);
  ASSERT_EQ(f->blobs.size(), 3u);
  EXPECT_EQ(f->blobs[0], text);
  EXPECT_TRUE(f->blobs[1] == tensor);
  EXPECT_EQ(f->blobs[2], "");
  // An answer without fields is still a frame (an empty object).
  ASSERT_TRUE(write_frame(p.b, Frame{}.head));
  const std::optional<Frame> empty = read_frame(p.a);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->head.is_object() && empty->head.empty());
}

TEST(RankLink, AClosedPeerReadsAsGoneAndWritingToItIsFalse) {
  Pair p;
  close(p.a);
  p.a = -1;
  EXPECT_FALSE(read_frame(p.b));
  EXPECT_FALSE(write_frame(p.b, {{"op", "poll"}}));  // no SIGPIPE: the test would die
}

TEST(RankLink, ATruncatedFrameReadsAsGone) {
  Pair p;
  std::string whole;
  {
    Pair q;
    ASSERT_TRUE(write_frame(q.a, {{"op", "send"}}, {"hello"}));
    whole.resize(64);
    whole.resize(recv(q.b, whole.data(), whole.size(), 0));
  }
  write_raw(p.a, whole.substr(0, whole.size() - 2));  // the peer died in the middle of it
  close(p.a);
  p.a = -1;
  EXPECT_FALSE(read_frame(p.b));
}

TEST(RankLink, GarbledFramesReadAsGone) {
  auto reads_as_gone = [](const std::string& payload) {
    Pair p;
    write_raw(p.a, raw<uint64_t>(payload.size()) + payload);
    return !read_frame(p.b);
  };
  const std::string head = "{\"op\":\"send\"}";
  const std::string good = raw<uint32_t>(head.size()) + head + raw<uint32_t>(1) + raw<uint64_t>(2) + "hi";
  {  // the same bytes, well formed, do read
    Pair p;
    write_raw(p.a, raw<uint64_t>(good.size()) + good);
    const std::optional<Frame> f = read_frame(p.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->blobs.at(0), "hi");
  }
  EXPECT_TRUE(reads_as_gone(raw<uint32_t>(5) + "nojsn" + raw<uint32_t>(0)));                      // not JSON
  EXPECT_TRUE(reads_as_gone(raw<uint32_t>(2) + "[]" + raw<uint32_t>(0)));                         // not an object
  EXPECT_TRUE(reads_as_gone(raw<uint32_t>(head.size()) + head + raw<uint32_t>(1) + raw<uint64_t>(99) + "hi"));  // blob past the end
  EXPECT_TRUE(reads_as_gone(raw<uint32_t>(head.size()) + head + raw<uint32_t>(3)));              // blobs missing
  EXPECT_TRUE(reads_as_gone(raw<uint32_t>(1000) + head));                                        // head past the end
  EXPECT_TRUE(reads_as_gone(good + "x"));                                                        // bytes left over
  Pair p;  // a size beyond any frame: refused before anything is allocated
  write_raw(p.a, raw<uint64_t>(uint64_t{1} << 62));
  EXPECT_FALSE(read_frame(p.b));
}

TEST(RankLink, AProcessEndIsDescribedAsRank0PrintsIt) {
  const int segv = status_of_child([] { raise(SIGSEGV); });
  const int killed = status_of_child([] { raise(SIGKILL); });
  const int exit3 = status_of_child([] { _exit(3); });
  std::printf("%s | %s | %s\n", describe_process_end(segv).c_str(), describe_process_end(killed).c_str(),
              describe_process_end(exit3).c_str());
  EXPECT_EQ(describe_process_end(segv), "signal 11 (Segmentation fault)");
  EXPECT_EQ(describe_process_end(killed), "killed (signal 9), possibly by the out-of-memory killer");
  EXPECT_EQ(describe_process_end(exit3), "exited with code 3");
}
