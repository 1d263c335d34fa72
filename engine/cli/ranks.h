// The processes one octodiff-cli run is spread over: this one alone, or K started by `mpirun -n K`
// when the CLI was built with MPI (cli/mpi/). Rank 0 leads: it prints, writes every file and
// hands out the work; the other ranks load their own copy of the model, compute what they are
// given and send the results back (docs/mpi-scaling.md).
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/sweep.h"
#include "pipeline/model.h"
#include "pipeline/sharded_pipeline.h"

namespace octodiff::cli {

class Ranks {
 public:
  // Joins the MPI job when built with MPI and started by mpirun; else a job of one. Under mpirun
  // the process forks first (before MPI_Init): the constructor returns in the child, the rank's
  // compute process, while the parent becomes the rank's MPI process and never returns
  // (cli/mpi/mpi_comm.h), so that a compute process that dies is reported by rank 0, not mpirun.
  Ranks();
  ~Ranks();  // leaves the MPI job
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool many() const { return size_ > 1; }
  bool leader() const { return rank_ == 0; }
  const std::string& host() const { return host_; }
  // Seconds a rank may stay silent (no progress, no heartbeat) before the run is ended:
  // --mpi-timeout (default 120).
  double timeout_seconds = 120;

 private:
  int rank_ = 0, size_ = 1;
  std::string host_;
  bool mpi_ = false;
};

// Rank 0's value on every rank (e.g. a random seed, which each process would draw differently).
int64_t rank0_value(Ranks& ranks, int64_t value);
std::string rank0_text(Ranks& ranks, const std::string& text);

// Loads the model on every rank, each from its own path and cache. When a rank cannot, rank 0
// throws an error naming that rank and its host, and the other ranks return nullptr (they then
// end quietly: the job's exit status is rank 0's). *seconds: this rank's load time.
std::shared_ptr<const StableDiffusionModel> load_model_on_ranks(Ranks& ranks, const std::filesystem::path& path,
                                                              const ModelLoadOptions& options, double* seconds);

// One run's devices split over the ranks (distributed/device_split.h): the joined result on rank
// 0 — bit-identical to pipe.run(whole.request) in one process — and nullopt on the others.
// *rank_json: per-rank devices and timings (rank 0).
std::optional<GenerationResult> run_devices_on_ranks(Ranks& ranks, ShardedPipeline& pipe,
                                                     const ResolvedRequest& whole, bool quiet,
                                                     nlohmann::json* rank_json);

}  // namespace octodiff::cli

namespace octodiff::cli {

// Called on rank 0 as each group of sweep items completes: the rank that ran it, the group's
// index, its result (one device per item) and its wall-clock seconds.
using GroupDone = std::function<void(int rank, int group, const GenerationResult& result, double seconds)>;

// Runs groups of sweep items (distributed/sweep.h), each as one run of `base`'s settings: in
// order in one process, or handed out by rank 0 to whichever rank is idle (ranks > 0 pass no
// groups: they compute what they are given). *rank_json: per-rank timings (rank 0, MPI).
void run_groups_on_ranks(Ranks& ranks, ShardedPipeline& pipe, const GenerationRequest& base,
                         const std::vector<std::vector<SweepItem>>& groups, bool quiet, const GroupDone& on_done,
                         nlohmann::json* rank_json);

}  // namespace octodiff::cli
