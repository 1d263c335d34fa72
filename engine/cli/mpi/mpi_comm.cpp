#include "mpi/mpi_comm.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "distributed/result_wire.h"

namespace octodiff::cli::mpi {
namespace {

constexpr int kControlTag = 1;
constexpr int kTensorTag = 2;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int n = 0;
  MPI_Error_string(code, text, &n);
  fail("MPI ", what, " failed: ", std::string(text, n));
}

void send_tensor(int to, const Tensor& t) {
  if (t.numel() > INT32_MAX) fail("a tensor of ", t.numel(), " floats is too large to send in one message");
  check(MPI_Send(t.data(), static_cast<int>(t.numel()), MPI_FLOAT, to, kTensorTag, MPI_COMM_WORLD), "send");
}

Tensor receive_tensor(int from, const Shape& shape, double timeout) {
  Tensor t = Tensor::empty(shape);
  MPI_Request request;
  check(MPI_Irecv(t.data(), static_cast<int>(t.numel()), MPI_FLOAT, from, kTensorTag, MPI_COMM_WORLD, &request),
        "receive");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    int done = 0;
    MPI_Status status;
    check(MPI_Test(&request, &done, &status), "test");
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      fail("rank ", from, " announced a result but sent no data for ", timeout, " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return t;
}

// Rank 0, when mpirun ends the job (SIGTERM) because a process exited before finishing — its
// default for a rank that crashed or was killed: say so and what to do, then end.
void on_job_ended(int) {
  static const char text[] =
      "octodiff-cli: error: mpirun ended the job: a rank ended before finishing (mpirun names it: process "
      "[[job,1],R] is rank R). Everything written so far is on disk; rerun the same command to resume a sweep. "
      "(With mpirun --mca orte_abort_on_non_zero_status 0, rank 0 names the rank and its host itself.)\n";
  const ssize_t ignored = write(STDERR_FILENO, text, sizeof text - 1);
  (void)ignored;
  _exit(143);
}

}  // namespace

void start(int* rank, int* size, std::string* host) {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int n = 0;
  MPI_Get_processor_name(name, &n);
  *host = std::string(name, n);
  // Errors come back as codes (check) instead of ending the job without a word.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (*rank == 0 && *size > 1) signal(SIGTERM, on_job_ended);
}

void finish() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int64_t broadcast_from_rank0(int64_t value) {
  check(MPI_Bcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "broadcast");
  return value;
}

std::string broadcast_from_rank0(const std::string& text) {
  int64_t size = broadcast_from_rank0(static_cast<int64_t>(text.size()));
  if (size > INT32_MAX) fail("a text of ", size, " bytes is too large to broadcast");
  std::string out = text;
  out.resize(size);
  check(MPI_Bcast(out.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD), "broadcast");
  return out;
}

void send(int to, const nlohmann::json& body) {
  const std::string text = body.dump();
  check(MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, to, kControlTag, MPI_COMM_WORLD), "send");
}

std::optional<Message> poll(int from) {
  int flag = 0;
  MPI_Status status;
  check(MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, kControlTag, MPI_COMM_WORLD, &flag, &status), "probe");
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(count, '\0');
  check(MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, kControlTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
        "receive");
  Message m;
  m.source = status.MPI_SOURCE;
  m.body = nlohmann::json::parse(text, nullptr, false);
  if (m.body.is_discarded() || !m.body.is_object() || !m.body.contains("type"))
    fail("rank ", m.source, " sent a message that is not a control message");
  return m;
}

void send_result(int to, const GenerationResult& result, nlohmann::json extra) {
  extra["type"] = "result";
  extra["header"] = result_header_json(result);
  send(to, extra);
  send_tensor(to, result.images);
  send_tensor(to, result.initial_latents);
  send_tensor(to, result.final_latents);
}

GenerationResult receive_result(const Message& announcement, double timeout) {
  const std::string header = announcement.body.at("header").get<std::string>();
  const ResultShapes shapes = result_header_shapes(header);
  Tensor images = receive_tensor(announcement.source, shapes.images, timeout);
  Tensor initial = receive_tensor(announcement.source, shapes.initial_latents, timeout);
  Tensor final_latents = receive_tensor(announcement.source, shapes.final_latents, timeout);
  return result_from_header(header, std::move(images), std::move(initial), std::move(final_latents));
}

void abort_job(const std::string& text) {
  std::fprintf(stderr, "octodiff-cli: error: %s\n", text.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace octodiff::cli::mpi
