// The compute process's side of mpi_comm.h: every call is a request to this rank's MPI process
// (mpi_relay.cpp), which makes the MPI calls and answers. No MPI here.
#include "mpi/mpi_comm.h"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "distributed/result_wire.h"
#include "mpi/mpi_relay.h"
#include "mpi/rank_link.h"

namespace octodiff::cli::mpi {
namespace {

using nlohmann::json;

int g_link = -1;  // the socket to this rank's MPI process

// The MPI process is gone: mpirun is ending the job (and this process goes with it).
[[noreturn]] void lost_mpi_process() { std::_Exit(1); }

Frame call(const json& head, const std::vector<std::string_view>& blobs = {}) {
  if (!write_frame(g_link, head, blobs)) lost_mpi_process();
  std::optional<Frame> answer = read_frame(g_link);
  if (!answer) lost_mpi_process();
  if (answer->head.contains("error")) fail(answer->head["error"].get<std::string>());
  return std::move(*answer);
}

std::string_view bytes_of(const Tensor& t) {
  return {reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.numel()) * sizeof(float)};
}

Tensor tensor_from(const std::string& bytes, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  if (bytes.size() != static_cast<size_t>(t.numel()) * sizeof(float))
    fail("received ", bytes.size(), " bytes for a tensor of ", t.numel(), " floats");
  std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

// The compute process: dies with its MPI process (whatever ends that), and learns its rank.
void become_compute_process(int link, pid_t mpi_process, int* rank, int* size, std::string* host) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != mpi_process) std::_Exit(1);  // it ended before prctl
  g_link = link;
  std::optional<Frame> hello = read_frame(g_link);
  if (!hello) std::_Exit(1);  // MPI_Init failed; the MPI process said why
  *rank = hello->head.at("rank").get<int>();
  *size = hello->head.at("size").get<int>();
  *host = hello->head.at("host").get<std::string>();
}

}  // namespace

void start(int* rank, int* size, std::string* host) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail("cannot make a socketpair for this rank's compute process: ", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t mpi_process = getpid();
  const pid_t compute = fork();
  if (compute < 0) fail("cannot fork this rank's compute process: ", std::strerror(errno));
  if (compute > 0) {
    close(fds[1]);
    run_mpi_process(fds[0], compute);  // never returns
  }
  close(fds[0]);
  become_compute_process(fds[1], mpi_process, rank, size, host);
}

void finish() {
  // The MPI process finalizes once this process has ended (closing the link tells it).
}

void set_timeout(double seconds) { call({{"op", "timeout"}, {"seconds", seconds}}); }

int64_t broadcast_from_rank0(int64_t value) {
  const std::string text = broadcast_from_rank0(std::to_string(value));
  return std::stoll(text);
}

std::string broadcast_from_rank0(const std::string& text) {
  Frame answer = call({{"op", "broadcast"}}, {text});
  if (answer.blobs.size() != 1) fail("a broadcast came back without its text");
  return std::move(answer.blobs[0]);
}

void send(int to, const nlohmann::json& body) { call({{"op", "send"}, {"to", to}}, {body.dump()}); }

std::optional<Message> poll(int from) {
  const Frame answer = call({{"op", "poll"}, {"from", from}});
  const int source = answer.head.value("source", -1);
  if (source < 0 || answer.blobs.size() != 1) return std::nullopt;
  Message m;
  m.source = source;
  m.body = nlohmann::json::parse(answer.blobs[0], nullptr, false);
  if (m.body.is_discarded() || !m.body.is_object() || !m.body.contains("type"))
    fail("rank ", m.source, " sent a message that is not a control message");
  return m;
}

void send_result(int to, const GenerationResult& result, nlohmann::json extra) {
  extra["type"] = "result";
  extra["header"] = result_header_json(result);
  const std::string control = extra.dump();
  call({{"op", "send_result"}, {"to", to}},
       {control, bytes_of(result.images), bytes_of(result.initial_latents), bytes_of(result.final_latents)});
}

GenerationResult receive_result(const Message& announcement, double timeout) {
  const std::string header = announcement.body.at("header").get<std::string>();
  const ResultShapes shapes = result_header_shapes(header);
  json floats = json::array();
  for (const Shape* s : {&shapes.images, &shapes.initial_latents, &shapes.final_latents})
    floats.push_back(shape_numel(*s));
  Frame answer = call({{"op", "receive_tensors"}, {"from", announcement.source}, {"floats", floats}, {"timeout", timeout}});
  if (answer.blobs.size() != 3) fail("a result from rank ", announcement.source, " came back without its tensors");
  return result_from_header(header, tensor_from(answer.blobs[0], shapes.images),
                            tensor_from(answer.blobs[1], shapes.initial_latents),
                            tensor_from(answer.blobs[2], shapes.final_latents));
}

void abort_job(const std::string& text) {
  std::fprintf(stderr, "octodiff-cli: error: %s\n", text.c_str());
  std::fflush(nullptr);
  write_frame(g_link, {{"op", "abort"}});  // the MPI process ends the job (MPI_Abort)
  std::_Exit(1);
}

}  // namespace octodiff::cli::mpi
