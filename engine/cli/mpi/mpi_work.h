// Work over the ranks of an MPI job, run by each rank's compute process (mpi_comm.h): the model
// loaded everywhere, units of work handed out by rank 0 (which computes too), results sent back,
// progress and heartbeats, and the end of the job — orderly when a rank reports an error or its
// compute process died (its MPI process says so: "died"), MPI_Abort when a rank falls silent.
//
//   rank r > 0                          rank 0
//   load (thread) ── alive… ready ──▶   loads too; all ready? go : stop + error naming rank/host
//   ◀── work {unit, spec}               hands the first unit a rank may take to every idle rank
//   compute (thread) ── progress… ──▶   per-rank progress, ETA; silent > timeout: abort
//   result header + tensors ────────▶   on_done(unit, result): files written as units complete
//   ◀── stop ── bye ────────────────▶   at the end, or after an error (then rethrown on rank 0)
//   (compute process gone) died ─────▶   stop to all, then "rank r (host H) died: signal 11 (…)"
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "pipeline/generation.h"
#include "ranks.h"

namespace octodiff::cli::mpi {

// Computes one unit (its spec as rank 0 wrote it) on this rank.
using Compute =
    std::function<GenerationResult(const nlohmann::json& spec, const ProgressCallback& progress, const CancelToken* cancel)>;

// Every rank runs `load` (its own model) while heartbeats go on. Returns true when every rank
// loaded. When some could not: rank 0 throws an octodiff::Error naming each with its host and
// error; the others return false.
bool load_everywhere(Ranks& ranks, const std::function<void()>& load, double* seconds);

// Ranks > 0: computes the units rank 0 sends until it says stop.
void serve(Ranks& ranks, const Compute& compute);

struct WorkUnit {
  nlohmann::json spec;  // what Compute receives; "devices": how many devices its run has
  int items = 1;        // what it counts for in progress and ETA
  int only_rank = -1;   // ≥ 0: only this rank runs it
  std::string label;    // for progress lines
};

struct UnitDone {
  int rank = 0;
  const WorkUnit* unit = nullptr;
  GenerationResult result;
  double seconds = 0;  // wall clock on its rank, from hand-out to result
};

// Rank 0: runs every unit (dynamically: an idle rank takes the first unit it may run, so a fast
// rank takes more) and calls on_done on this thread as each completes. Every other rank is told
// to stop at the end or when anything fails; an error of any rank is rethrown here naming it.
void coordinate(Ranks& ranks, const Compute& local, std::vector<WorkUnit> units, bool quiet,
                const std::function<void(UnitDone&)>& on_done);

// Per rank (rank 0): host, load seconds, units, items, busy seconds of the last coordinate().
nlohmann::json rank_report();

// For tests only: OCTODIFF_TEST_RANK_SIGNAL=R:SIG[:N] makes rank R's compute process raise
// signal SIG (11: a crash, 9: as the OOM killer does) when it starts its N-th unit of work (N = 1
// when not given; 0: while it loads the model). Nothing when unset.
void test_signal_if_asked(int rank, int unit);

}  // namespace octodiff::cli::mpi
