#include "ranks.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "distributed/sweep.h"
#ifdef OCTODIFF_WITH_MPI
#include "mpi/mpi_run.h"
#endif

namespace octodiff::cli {
namespace {

// mpirun (OpenMPI, MPICH, Slurm's PMI) tells its processes so in their environment; a CLI started
// by hand never touches MPI.
bool started_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

std::string hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

Ranks::Ranks() : host_(hostname()) {
  if (!started_by_mpirun()) return;
#ifdef OCTODIFF_WITH_MPI
  mpi::start(&rank_, &size_, &host_);
  mpi_ = true;
#else
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE"); n && std::atoi(n) > 1)
    fail("started by mpirun with ", n, " processes, but this octodiff-cli was built without MPI (install "
         "libopenmpi-dev and build again: CMake then finds it)");
#endif
}

Ranks::~Ranks() {
#ifdef OCTODIFF_WITH_MPI
  if (mpi_) mpi::finish();
#endif
}

int64_t rank0_value(Ranks& ranks, int64_t value) {
#ifdef OCTODIFF_WITH_MPI
  if (ranks.many()) return mpi::broadcast_from_rank0(value);
#endif
  (void)ranks;
  return value;
}

std::string rank0_text(Ranks& ranks, const std::string& text) {
#ifdef OCTODIFF_WITH_MPI
  if (ranks.many()) return mpi::broadcast_from_rank0(text);
#endif
  (void)ranks;
  return text;
}

std::shared_ptr<const StableDiffusionModel> load_model_on_ranks(Ranks& ranks, const std::filesystem::path& path,
                                                              const ModelLoadOptions& options, double* seconds) {
#ifdef OCTODIFF_WITH_MPI
  if (ranks.many()) return mpi::load_model(ranks, path, options, seconds);
#endif
  (void)ranks;
  const auto t0 = std::chrono::steady_clock::now();
  auto model = StableDiffusionModel::load(path, options);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return model;
}

std::optional<GenerationResult> run_devices_on_ranks(Ranks& ranks, ShardedPipeline& pipe,
                                                     const ResolvedRequest& whole, bool quiet,
                                                     nlohmann::json* rank_json) {
#ifdef OCTODIFF_WITH_MPI
  if (ranks.many()) return mpi::run_devices(ranks, pipe, whole, quiet, rank_json);
#endif
  (void)ranks, (void)quiet, (void)rank_json;
  return pipe.run(whole.request);
}

void run_groups_on_ranks(Ranks& ranks, ShardedPipeline& pipe, const GenerationRequest& base,
                         const std::vector<std::vector<SweepItem>>& groups, bool quiet, const GroupDone& on_done,
                         nlohmann::json* rank_json) {
#ifdef OCTODIFF_WITH_MPI
  if (ranks.many()) return mpi::run_groups(ranks, pipe, base, groups, quiet, on_done, rank_json);
#endif
  (void)quiet, (void)rank_json;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto t0 = std::chrono::steady_clock::now();
    const GenerationResult result = pipe.run(sweep_group_request(base, groups[g]));
    on_done(ranks.rank(), static_cast<int>(g), result,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

}  // namespace octodiff::cli
