#include "mpi/mpi_relay.h"

#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "mpi/rank_link.h"

namespace octodiff::cli::mpi {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kControlTag = 1;
constexpr int kTensorTag = 2;

// What the MPI process of a rank knows while it relays.
struct Relay {
  int link = -1;
  pid_t compute = -1;
  int rank = 0, size = 1;
  std::string host;
  double timeout = 120;       // --mpi-timeout, once the compute process has said it
  bool said_bye = false;      // the compute process sent rank 0 its "bye": rank 0 needs it no more
  bool stop_relayed = false;  // rank 0's "stop" reached the compute process
  std::vector<bool> bye_from;  // rank 0: the ranks whose "bye" it relayed
};

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int n = 0;
  MPI_Error_string(code, text, &n);
  fail("MPI ", what, " failed: ", std::string(text, n));
}

std::string type_of(const std::string& message) {
  const json body = json::parse(message, nullptr, false);
  return body.is_object() ? body.value("type", "") : "";
}

// Rank 0, when mpirun ends the job (SIGTERM) because an MPI process exited before finishing —
// its default when a rank's MPI process (not its compute process) crashed or was killed.
void on_job_ended(int) {
  static const char text[] =
      "octodiff-cli: error: mpirun ended the job: the MPI process of a rank ended before finishing (mpirun names "
      "it: process [[job,1],R] is rank R). Everything written so far is on disk; rerun the same command to resume "
      "a sweep. (With mpirun --mca orte_abort_on_non_zero_status 0, rank 0 names the rank and its host itself.)\n";
  const ssize_t ignored = write(STDERR_FILENO, text, sizeof text - 1);
  (void)ignored;
  _exit(143);
}

[[noreturn]] void end_job(const std::string& text, int code) {
  if (!text.empty()) std::fprintf(stderr, "octodiff-cli: error: %s\n", text.c_str());
  std::fflush(nullptr);
  signal(SIGTERM, SIG_DFL);  // mpirun's SIGTERM now is this abort's, not news to report
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

[[noreturn]] void finalize_and_exit(int code) {
  signal(SIGTERM, SIG_DFL);
  MPI_Finalize();
  std::fflush(nullptr);
  std::_Exit(code);
}

void send_text(int to, const std::string& text) {
  check(MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, to, kControlTag, MPI_COMM_WORLD), "send");
}

// A control message from `from` (any rank when -1), if one has arrived.
std::optional<std::pair<int, std::string>> receive_text(int from) {
  int flag = 0;
  MPI_Status status;
  check(MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, kControlTag, MPI_COMM_WORLD, &flag, &status), "probe");
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(count, '\0');
  check(MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, kControlTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
        "receive");
  return std::make_pair(status.MPI_SOURCE, std::move(text));
}

// `floats` floats from `from`, waiting at most `timeout` seconds.
std::string receive_floats(int from, int64_t floats, double timeout) {
  if (floats > INT32_MAX) fail("a tensor of ", floats, " floats is too large to receive in one message");
  std::string bytes(static_cast<size_t>(floats) * sizeof(float), '\0');
  MPI_Request request;
  check(MPI_Irecv(bytes.data(), static_cast<int>(floats), MPI_FLOAT, from, kTensorTag, MPI_COMM_WORLD, &request),
        "receive");
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "test");
    if (done) return bytes;
    if (Clock::now() > deadline) {
      MPI_Cancel(&request);
      fail("rank ", from, " announced a result but sent no data for ", timeout, " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// For tests only (mpi_relay.h).
void test_exit_if_asked(const Relay& r) {
  const char* v = std::getenv("OCTODIFF_TEST_RANK_EXIT");
  if (v && std::atoi(v) == r.rank) std::_Exit(3);
}

Frame poll_for(Relay& r, const Frame& ask) {
  Frame answer;
  answer.head = {{"source", -1}};
  auto m = receive_text(ask.head.at("from").get<int>());
  if (!m) return answer;
  const std::string type = type_of(m->second);
  if (type == "bye" && r.rank == 0) r.bye_from.at(m->first) = true;
  if (type == "stop") r.stop_relayed = true;
  if (type == "work") test_exit_if_asked(r);
  answer.head["source"] = m->first;
  answer.blobs.push_back(std::move(m->second));
  return answer;
}

Frame broadcast(const Frame& ask) {
  std::string text = ask.blobs.at(0);
  int64_t size = static_cast<int64_t>(text.size());
  check(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "broadcast");
  if (size > INT32_MAX) fail("a text of ", size, " bytes is too large to broadcast");
  text.resize(size);
  check(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD), "broadcast");
  Frame answer;
  answer.blobs.push_back(std::move(text));
  return answer;
}

void send_result(const Frame& ask) {
  const int to = ask.head.at("to").get<int>();
  if (ask.blobs.size() != 4) fail("a result to send needs its message and three tensors");
  send_text(to, ask.blobs[0]);
  for (size_t i = 1; i < 4; ++i) {
    const size_t floats = ask.blobs[i].size() / sizeof(float);
    if (floats > INT32_MAX) fail("a tensor of ", floats, " floats is too large to send in one message");
    check(MPI_Send(ask.blobs[i].data(), static_cast<int>(floats), MPI_FLOAT, to, kTensorTag, MPI_COMM_WORLD), "send");
  }
}

Frame receive_tensors(const Frame& ask) {
  Frame answer;
  const int from = ask.head.at("from").get<int>();
  for (const json& floats : ask.head.at("floats"))
    answer.blobs.push_back(receive_floats(from, floats.get<int64_t>(), ask.head.at("timeout").get<double>()));
  return answer;
}

// One request of the compute process, carried out.
Frame serve(Relay& r, const Frame& ask) {
  const std::string op = ask.head.value("op", "");
  if (op == "poll") return poll_for(r, ask);
  if (op == "send") {
    send_text(ask.head.at("to").get<int>(), ask.blobs.at(0));
    if (type_of(ask.blobs[0]) == "bye") r.said_bye = true;
  } else if (op == "send_result") {
    send_result(ask);
  } else if (op == "receive_tensors") {
    return receive_tensors(ask);
  } else if (op == "broadcast") {
    return broadcast(ask);
  } else if (op == "timeout") {
    r.timeout = ask.head.at("seconds").get<double>();
  } else if (op == "abort") {
    end_job("", 1);  // the compute process printed why
  } else {
    fail("this rank's compute process asked for '", op, "', which its MPI process does not know");
  }
  return {};
}

void relay_until_the_compute_process_ends(Relay& r) {
  while (std::optional<Frame> ask = read_frame(r.link)) {
    Frame answer;
    try {
      answer = serve(r, *ask);
    } catch (const std::exception& e) {
      answer.head = {{"error", e.what()}};
    }
    std::vector<std::string_view> blobs(answer.blobs.begin(), answer.blobs.end());
    if (!write_frame(r.link, answer.head, blobs)) return;
  }
}

// waitpid's status of the compute process; nullopt if it cannot be had.
std::optional<int> wait_for(pid_t pid) {
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, 0) == pid) return status;
    if (errno != EINTR) return std::nullopt;
  }
}

Relay join_the_job(int link, pid_t compute) {
  Relay r;
  r.link = link;
  r.compute = compute;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int n = 0;
  MPI_Get_processor_name(name, &n);
  r.host = std::string(name, n);
  r.bye_from.assign(r.size, false);
  // Errors come back as codes (check), then to the compute process as exceptions.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (r.rank == 0 && r.size > 1) signal(SIGTERM, on_job_ended);
  write_frame(r.link, {{"rank", r.rank}, {"size", r.size}, {"host", r.host}});
  return r;
}

std::string who(const Relay& r) { return cat("rank ", r.rank, " (host ", r.host, ")"); }

// Rank 0's compute process has ended.
[[noreturn]] void end_rank0(const Relay& r, std::optional<int> status) {
  if (!status || !WIFEXITED(*status))
    end_job(cat(who(r), " died: ", status ? describe_process_end(*status) : "ended in an unknown way",
                ". The job is ended; a sweep's finished items are on disk (rerun the same command to resume it)."),
            1);
  const int code = WEXITSTATUS(*status);
  std::string at_work;
  for (int q = 1; q < r.size; ++q)
    if (!r.bye_from[q]) at_work += cat(at_work.empty() ? "" : ", ", q);
  if (!at_work.empty())  // it ended on an error of its own (printed) while others still worked
    end_job(code ? "" : cat("rank 0 ended while rank(s) ", at_work, " had not stopped"), code ? code : 1);
  finalize_and_exit(code);
}

// Rank r > 0 whose compute process died: waits (bounded) for rank 0's "stop" if it has not
// reached the compute process yet.
void await_stop(const Relay& r, const std::string& how) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(r.timeout);
  for (;;) {
    while (auto m = receive_text(0))
      if (type_of(m->second) == "stop") return;
    if (Clock::now() > deadline)
      end_job(cat(who(r), ": its compute process died (", how, ") and rank 0 sent no stop for ", r.timeout, " s"), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Rank r > 0's compute process has ended.
[[noreturn]] void end_other_rank(const Relay& r, std::optional<int> status) {
  const bool exited = status && WIFEXITED(*status);
  if (exited && r.said_bye) finalize_and_exit(WEXITSTATUS(*status));
  std::string how = status ? describe_process_end(*status) : "ended in an unknown way";
  if (exited) how += " before it finished (its own error, if it printed one, is above)";
  try {
    send_text(0, json{{"type", "died"}, {"host", r.host}, {"message", how}}.dump());
    if (!r.stop_relayed) await_stop(r, how);
    send_text(0, json{{"type", "bye"}}.dump());
  } catch (const std::exception& e) {
    end_job(cat(who(r), ": its compute process died (", how, "), and rank 0 could not be told: ", e.what()), 1);
  }
  finalize_and_exit(0);  // the job's exit status is rank 0's, which names this rank
}

}  // namespace

void run_mpi_process(int link, pid_t compute_process) {
  Relay r = join_the_job(link, compute_process);
  relay_until_the_compute_process_ends(r);
  close(r.link);  // a compute process still writing learns its MPI process is done with it
  const std::optional<int> status = wait_for(r.compute);
  if (r.rank == 0) end_rank0(r, status);
  end_other_rank(r, status);
}

}  // namespace octodiff::cli::mpi
