// octodiff-cli generate --seeds A-B / --prompts-file FILE: a sweep of many device-sized items
// (distributed/sweep.h) written to --out-dir as they complete, resumable, in one process or
// over the ranks of an MPI job (ranks.h).
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "distributed/sweep.h"
#include "pipeline/model.h"
#include "ranks.h"

namespace octodiff::cli {

extern const char* kSweepUsage;

// --seeds or --prompts-file given.
bool sweep_requested(const Args& args);
// --prompt values then the lines of --prompts-file, as rank 0 read them (the other ranks need
// no copy of the file).
std::vector<std::string> sweep_prompt_list(Ranks& ranks, const Args& args);

struct SweepPlan {
  std::vector<SweepItem> items;
  std::filesystem::path dir;  // --out-dir
  int group = 0;              // items per run (--devices; 0: one per thread for small models, else 1)
  int threads = 1;            // per rank (--threads, default all)
  int scale = 1;              // --scale
};

// `prompts`: the sweep's prompts as the request has them (LoRA tags removed).
// `seed`: the request's (--seed) when --seeds is not given.
SweepPlan sweep_plan_from_args(const Args& args, const std::vector<std::string>& prompts, int64_t seed, int threads);

int run_sweep(Ranks& ranks, const Args& args, const SweepPlan& plan, const GenerationRequest& req,
              const std::shared_ptr<const StableDiffusionModel>& model, FILE* info, double load_seconds);

}  // namespace octodiff::cli
