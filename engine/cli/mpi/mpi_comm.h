// The few MPI calls octodiff-cli makes, over MPI_COMM_WORLD, from the main thread only
// (MPI_THREAD_FUNNELED: the pipeline's threads never call MPI). Control messages are small JSON
// objects {"type": …}; a result is a control message with its header (distributed/result_wire.h)
// followed by its three float tensors, sent as they are. Every wait is bounded: it polls, and
// ends the job when the peer stays silent past the deadline.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/generation.h"

namespace octodiff::cli::mpi {

void start(int* rank, int* size, std::string* host);
void finish();

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
