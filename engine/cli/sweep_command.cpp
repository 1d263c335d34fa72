#include "sweep_command.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "distributed/sweep_store.h"
#include "pipeline/export.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"

namespace octodiff::cli {

const char* kSweepUsage =
    "sweeps (many prompts x many seeds, one PNG per image as it completes, resumable):\n"
    "  --seeds A-B               every seed from A to B (instead of --seed)\n"
    "  --prompts-file FILE       one prompt per line (after any --prompt)\n"
    "                            item (prompt, seed) = the run --prompt P --seed S: the same images;\n"
    "                            written to --out-dir as p<prompt>-s<seed>.png with index.jsonl and\n"
    "                            sweep.json; a rerun skips the finished items\n"
    "  --devices G               items per run (default: one per thread, at most 8, when the\n"
    "                            model is small enough to run devices side by side; else 1)\n"
    "  under mpirun -n K: rank 0 hands groups to idle ranks; --mpi-timeout S ends the job when a\n"
    "                            rank stays silent S seconds (default 120)\n";

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Everything the images depend on but the item's prompt and seed: a rerun must match it.
std::string sweep_settings(const GenerationRequest& req, const ResolvedRequest& one, const StableDiffusionModel& m,
                           int scale) {
  json loras = json::array();
  for (const AppliedLora& l : m.loras()) loras.push_back({l.spec.path.filename().string(), l.spec.strength});
  json settings{{"model", m.display_name()},
                {"model_hash", m.model_hash()},
                {"loras", loras},
                {"signature", one.signature.str()},
                {"guidance_scale", req.guidance_scale},
                {"negative_prompt", req.negative_prompts.empty() ? "" : req.negative_prompts[0]},
                {"rng", jax::rng_scheme_name(req.rng)},
                {"prompt_syntax", prompt_syntax_name(req.prompt_syntax)},
                {"long_prompts", long_prompts_name(req.long_prompts)},
                {"comma_backtrack", req.comma_backtrack},
                {"init_images", req.init_images.size()},
                {"scale", scale}};
  if (req.clip_skip != 1) settings["clip_skip"] = req.clip_skip;  // absent in sweeps made before it existed
  return settings.dump();
}

// Items per run when --devices is not given: one per thread when the pipeline runs devices side
// by side (small networks: the rule of ShardedPipeline's plan, sharded_pipeline.cpp), else one —
// a large model runs its devices one after another with every thread, so a group of several
// would only write its images later and hand out work in coarser pieces.
int default_group(const StableDiffusionModel& m, const ResolvedRequest& one, int threads) {
  const double latent_pixels = double(one.latent_height) * one.latent_width * one.signature.batch;
  const bool side_by_side = double(m.weights_bytes()) * latent_pixels < 2.0e12;
  return side_by_side ? std::clamp(threads, 1, 8) : 1;
}

std::vector<std::vector<SweepItem>> groups_of(const std::vector<SweepItem>& items, int size) {
  std::vector<std::vector<SweepItem>> groups;
  for (size_t i = 0; i < items.size(); i += size)
    groups.emplace_back(items.begin() + i, items.begin() + std::min(items.size(), i + size));
  return groups;
}

// Rank 0: writes each item of a finished group and says so.
struct SweepWriter {
  SweepStore& store;
  const GenerationRequest& req;
  const StableDiffusionModel& model;
  const std::vector<std::vector<SweepItem>>& groups;
  int scale = 1, total = 0, written = 0;
  bool quiet = false;
  FILE* info = stderr;
  double busy_seconds = 0;  // the runs' wall clock (one process)

  void operator()(int rank, int group, const GenerationResult& result, double seconds) {
    const std::vector<SweepItem>& items = groups.at(group);
    busy_seconds += seconds;
    for (size_t g = 0; g < items.size(); ++g) {
      const GenerationResult item_result = sweep_item_result(result, static_cast<int>(g));
      const GenerationRequest item_req = sweep_item_request(req, items[g]);
      std::vector<Image8> images = result_images(item_result);
      std::vector<std::vector<PngText>> texts;
      for (size_t b = 0; b < images.size(); ++b) {
        if (scale > 1) images[b] = upscale_nearest(images[b], scale);
        texts.push_back(png_texts(describe_image(item_req, item_result, model, 0, static_cast<int>(b))));
      }
      const json extra = {{"rank", rank}, {"group_seconds", seconds}, {"group_items", items.size()}};
      store.write_item(items[g], images, texts, extra.dump());
      ++written;
      if (!quiet)
        std::fprintf(info, "  [%d/%d] %s  rank %d, %.2f s for %zu item%s\n", written, total,
                     sweep_item_file(items[g], 0, req.batch_per_device).c_str(), rank, seconds, items.size(),
                     items.size() == 1 ? "" : "s");
    }
  }
};

}  // namespace

bool sweep_requested(const Args& args) { return args.get("seeds") || args.get("prompts-file"); }

std::vector<std::string> sweep_prompt_list(Ranks& ranks, const Args& args) {
  json list;
  if (ranks.leader()) {
    try {
      std::vector<std::string> prompts = args.all("prompt");
      if (auto f = args.get("prompts-file")) {
        const std::vector<std::string> lines = read_prompts_file(*f);
        prompts.insert(prompts.end(), lines.begin(), lines.end());
      }
      list = prompts;
    } catch (const Error& e) {
      list = {{"error", e.what()}};  // every rank must reach the broadcast before failing
    }
  }
  list = json::parse(rank0_text(ranks, list.dump()));
  if (list.is_object()) fail(list["error"].get<std::string>());
  return list.get<std::vector<std::string>>();
}

SweepPlan sweep_plan_from_args(const Args& args, const std::vector<std::string>& prompts, int64_t seed,
                               int threads) {
  if (!args.get("out-dir")) fail("a sweep (--seeds, --prompts-file) writes its images to --out-dir: give one");
  if (args.get("seeds") && args.get("seed")) fail("give --seeds A-B or --seed N, not both");
  if (args.get("out")) fail("a sweep writes one PNG per image to --out-dir; --out (a grid) does not apply");
  for (const char* o : {"repeat", "save-latents", "save-array", "x", "y", "z"})
    if (args.get(o)) fail("--", o, " cannot be used in a sweep");
  SweepPlan plan;
  const SeedRange seeds = args.get("seeds") ? parse_seed_range(*args.get("seeds")) : SeedRange{seed, seed};
  plan.items = enumerate_sweep_items(prompts, seeds);
  plan.dir = *args.get("out-dir");
  plan.group = args.get_int("devices", 0, 1, 64);
  plan.threads = threads;
  plan.scale = args.get_int("scale", 1, 1, 16);
  return plan;
}

int run_sweep(Ranks& ranks, const Args& args, const SweepPlan& plan, const GenerationRequest& req,
              const std::shared_ptr<const StableDiffusionModel>& model, FILE* info, double load_seconds) {
  const bool quiet = args.flag("quiet");
  ShardedPipeline pipe(model);
  const ResolvedRequest one = pipe.resolve(sweep_group_request(req, {plan.items.front()}));  // fail fast
  if (!ranks.leader()) {
    run_groups_on_ranks(ranks, pipe, req, {}, quiet, {}, nullptr);
    return 0;
  }
  const int group = plan.group ? plan.group : default_group(*model, one, plan.threads);
  SweepStore store(plan.dir, sweep_settings(req, one, *model, plan.scale), req.batch_per_device);
  store.reconcile(plan.items);
  const std::vector<SweepItem> pending = store.pending(plan.items);
  const auto groups = groups_of(pending, group);
  std::fprintf(info, "sweep: %zu items in %s, %d finished already, %zu to run in %zu run%s of up to %d on %d rank%s\n",
               plan.items.size(), plan.dir.string().c_str(), store.finished_at_open(), pending.size(), groups.size(),
               groups.size() == 1 ? "" : "s", group, ranks.size(), ranks.size() == 1 ? "" : "s");
  SweepWriter writer{store, req, *model, groups, plan.scale, static_cast<int>(pending.size()), 0, quiet, info};
  json rank_json = json::array();
  const auto t0 = Clock::now();
  run_groups_on_ranks(ranks, pipe, req, groups, quiet, std::ref(writer), &rank_json);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!ranks.many())
    rank_json = json::array({{{"rank", 0}, {"host", ranks.host()}, {"load_seconds", load_seconds},
                              {"units", groups.size()}, {"items", writer.written},
                              {"busy_seconds", writer.busy_seconds},
                              {"seconds_per_item", writer.written ? writer.busy_seconds / writer.written : 0.0}}});
  const double per_minute = seconds > 0 ? 60.0 * writer.written / seconds : 0.0;
  std::fprintf(info, "sweep: %d items written in %.2f s (%.1f items/min) to %s\n", writer.written, seconds, per_minute,
               plan.dir.string().c_str());
  if (args.flag("json")) {
    const json j = {{"sweep",
                     {{"dir", plan.dir.string()}, {"items", plan.items.size()},
                      {"finished_before", store.finished_at_open()}, {"written", writer.written},
                      {"group_size", group}, {"runs", groups.size()}, {"seconds", seconds},
                      {"items_per_minute", per_minute}, {"load_seconds", load_seconds}, {"ranks", rank_json}}}};
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace octodiff::cli
