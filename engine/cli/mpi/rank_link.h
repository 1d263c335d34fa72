// The link between the two processes of one rank under mpirun (mpi_comm.h): the MPI process,
// which alone calls MPI, and its compute process, forked before MPI_Init, which loads the model
// and runs the pipeline. Over a socketpair the compute process asks for MPI operations (send,
// poll, broadcast, receive tensors) and the MPI process answers; when the compute process dies
// its MPI process is still there to tell rank 0 how (mpi_relay.h).
//
// A frame: u64 payload bytes, then the payload: u32 head bytes, the head (JSON), u32 blob count,
// then each blob as u64 bytes + the bytes (control message texts, float tensors as they are).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace octodiff::cli::mpi {

struct Frame {
  nlohmann::json head = nlohmann::json::object();  // {"op": …} asked, or the answer's fields
  std::vector<std::string> blobs;  // raw bytes
};

// Writes one frame to `fd`; false when the other process is gone (never SIGPIPE).
bool write_frame(int fd, const nlohmann::json& head, const std::vector<std::string_view>& blobs = {});
// Reads one frame from `fd`; nullopt when the other process closed its end or died, or sent
// bytes that are not a frame.
std::optional<Frame> read_frame(int fd);

// How a process ended, from waitpid's status, for a person: "signal 11 (Segmentation fault)",
// "killed (signal 9), possibly by the out-of-memory killer", "exited with code 3".
std::string describe_process_end(int wait_status);

}  // namespace octodiff::cli::mpi
