// The MPI versions of cli/ranks.h's functions (called there when the job has several ranks).
#pragma once

#include "mpi/mpi_comm.h"
#include "ranks.h"

namespace octodiff::cli::mpi {

std::shared_ptr<const StableDiffusionModel> load_model(Ranks& ranks, const std::filesystem::path& path,
                                                     const ModelLoadOptions& options, double* seconds);
std::optional<GenerationResult> run_devices(Ranks& ranks, ShardedPipeline& pipe, const ResolvedRequest& whole,
                                            bool quiet, nlohmann::json* rank_json);
void run_groups(Ranks& ranks, ShardedPipeline& pipe, const GenerationRequest& base,
                const std::vector<std::vector<SweepItem>>& groups, bool quiet, const GroupDone& on_done,
                nlohmann::json* rank_json);

}  // namespace octodiff::cli::mpi
