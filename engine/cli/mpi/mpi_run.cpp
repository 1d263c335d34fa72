#include "mpi/mpi_run.h"

#include <cstdlib>

#include "core/error.h"
#include "distributed/device_split.h"
#include "distributed/sweep.h"
#include "mpi/mpi_work.h"

namespace octodiff::cli::mpi {
namespace {

using nlohmann::json;

// For tests only: OCTODIFF_TEST_RANK_MODEL=R:PATH makes rank R load PATH instead of the model it
// was given, as a host whose copy of the model is missing or broken would.
std::filesystem::path model_path_for_rank(const Ranks& ranks, const std::filesystem::path& path) {
  const char* v = std::getenv("OCTODIFF_TEST_RANK_MODEL");
  if (!v) return path;
  const std::string text = v;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail("OCTODIFF_TEST_RANK_MODEL must be RANK:PATH, got '", text, "'");
  return std::atoi(text.substr(0, colon).c_str()) == ranks.rank() ? std::filesystem::path(text.substr(colon + 1))
                                                                   : path;
}

SweepItem item_from_json(const json& j) {
  return {j.at("index").get<int>(), j.at("prompt_index").get<int>(), j.at("seed").get<int64_t>(),
          j.at("prompt").get<std::string>()};
}

json item_json(const SweepItem& item) {
  return {{"index", item.index}, {"prompt_index", item.prompt_index}, {"seed", item.seed}, {"prompt", item.prompt}};
}

}  // namespace

std::shared_ptr<const StableDiffusionModel> load_model(Ranks& ranks, const std::filesystem::path& path,
                                                     const ModelLoadOptions& options, double* seconds) {
  std::shared_ptr<const StableDiffusionModel> model;
  const std::filesystem::path own_path = model_path_for_rank(ranks, path);
  set_timeout(ranks.timeout_seconds);  // for this rank's MPI process, should this process die
  const bool everyone = load_everywhere(ranks,
                                        [&] {
                                          test_signal_if_asked(ranks.rank(), 0);
                                          model = StableDiffusionModel::load(own_path, options);
                                        },
                                        seconds);
  return everyone ? model : nullptr;
}

std::optional<GenerationResult> run_devices(Ranks& ranks, ShardedPipeline& pipe, const ResolvedRequest& whole,
                                            bool quiet, json* rank_json) {
  Compute compute = [&](const json& spec, const ProgressCallback& progress, const CancelToken* cancel) {
    const DeviceRange range{spec.at("begin").get<int>(), spec.at("end").get<int>()};
    return pipe.run(device_subset_request(whole, range), progress, {}, cancel);
  };
  if (!ranks.leader()) {
    serve(ranks, compute);
    return std::nullopt;
  }
  const std::vector<DeviceRange> ranges = split_devices(whole.signature.devices, ranks.size());
  std::vector<WorkUnit> units;
  for (int r = 0; r < ranks.size(); ++r) {
    if (!ranges[r].size()) continue;
    units.push_back({{{"begin", ranges[r].begin}, {"end", ranges[r].end}, {"devices", ranges[r].size()}},
                     ranges[r].size(), r, cat("devices ", ranges[r].begin + 1, "-", ranges[r].end)});
  }
  std::vector<GenerationResult> parts(ranks.size());
  std::vector<bool> have(ranks.size(), false);
  coordinate(ranks, compute, units, quiet, [&](UnitDone& done) {
    parts[done.rank] = std::move(done.result);
    have[done.rank] = true;
  });
  std::vector<GenerationResult> ordered;
  for (int r = 0; r < ranks.size(); ++r)
    if (have[r]) ordered.push_back(std::move(parts[r]));
  if (rank_json) {
    *rank_json = rank_report();
    for (auto& j : *rank_json) {
      const DeviceRange range = ranges.at(j["rank"].get<int>());
      j["devices"] = {range.begin, range.end};
    }
  }
  return join_device_results(whole, ordered);
}

void run_groups(Ranks& ranks, ShardedPipeline& pipe, const GenerationRequest& base,
                const std::vector<std::vector<SweepItem>>& groups, bool quiet, const GroupDone& on_done,
                json* rank_json) {
  Compute compute = [&](const json& spec, const ProgressCallback& progress, const CancelToken* cancel) {
    std::vector<SweepItem> items;
    for (const json& j : spec.at("items")) items.push_back(item_from_json(j));
    return pipe.run(sweep_group_request(base, items), progress, {}, cancel);
  };
  if (!ranks.leader()) return serve(ranks, compute);
  std::vector<WorkUnit> units;
  for (size_t g = 0; g < groups.size(); ++g) {
    json items = json::array();
    for (const SweepItem& item : groups[g]) items.push_back(item_json(item));
    const int n = static_cast<int>(groups[g].size());
    units.push_back({{{"group", g}, {"items", items}, {"devices", n}}, n, -1,
                     cat(sweep_item_stem(groups[g].front()), n > 1 ? cat(" +", n - 1) : std::string())});
  }
  coordinate(ranks, compute, units, quiet, [&](UnitDone& done) {
    on_done(done.rank, done.unit->spec.at("group").get<int>(), done.result, done.seconds);
  });
  if (rank_json) *rank_json = rank_report();
}

}  // namespace octodiff::cli::mpi
