// What octodiff-cli's ranks say to each other under mpirun, over MPI_COMM_WORLD. Every rank is
// two processes: start() forks, before MPI_Init, a compute process that loads the model, runs
// the pipeline and the protocol (mpi_work.h) and returns from start(); the original process
// becomes the rank's MPI process (mpi_relay.h), the only one that calls MPI, and carries out
// these calls for it over a socketpair (rank_link.h), one at a time: call them from one thread
// (the compute process's main thread; the pipeline's threads never do). When the compute
// process dies (a crash, the OOM killer) the MPI process lives on to tell rank 0, which ends the
// run naming the rank and its host: mpirun, which ends the whole job at once when an MPI process
// dies, never sees one die.
//
// Control messages are small JSON objects {"type": …}; a result is a control message with its
// header (distributed/result_wire.h) followed by its three float tensors, sent as they are.
// Every wait is bounded: it polls, and ends the job when the peer stays silent past the deadline.
// A rank whose compute process died sends rank 0 {"type": "died", "host", "message"} and then
// answers its "stop" with "bye" like any rank.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/generation.h"

namespace octodiff::cli::mpi {

// Forks this rank's compute process and returns in it with the rank, the job's size and the
// host; the MPI process never returns from it (it exits when the compute process has ended).
void start(int* rank, int* size, std::string* host);
void finish();
// How long this rank's MPI process waits for rank 0's "stop" after its compute process died
// (--mpi-timeout; 120 s until told).
void set_timeout(double seconds);

struct Message {
  int source = -1;
  nlohmann::json body;  // {"type": …, …}
};

// Rank 0's value on every rank (MPI_Bcast: every rank must call it at the same point).
int64_t broadcast_from_rank0(int64_t value);
std::string broadcast_from_rank0(const std::string& text);

void send(int to, const nlohmann::json& body);
// A control message from `from` (any rank when -1) if one has arrived; never blocks.
std::optional<Message> poll(int from = -1);
// The result as {"type": "result", "header": …} + `extra` fields, then its tensors.
void send_result(int to, const GenerationResult& result, nlohmann::json extra);
// The tensors announced by a "result" message from `from`, joined to its header; waits at most
// `timeout` seconds (then throws octodiff::Error).
GenerationResult receive_result(const Message& announcement, double timeout);

// Prints "octodiff-cli: error: <text>" and ends every process of the job (MPI_Abort): for the
// cases where a peer cannot be told to stop (it is silent, or gone).
[[noreturn]] void abort_job(const std::string& text);

}  // namespace octodiff::cli::mpi
