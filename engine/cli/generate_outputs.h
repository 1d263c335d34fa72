// octodiff-cli generate's outputs: the files one generation writes and its --json report.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "args.h"
#include "pipeline/generation.h"
#include "pipeline/model.h"

namespace octodiff::cli {

// Writes the grid PNG `out`, then --out-dir's PNGs, --save-latents and --save-array (each said on
// `info`); returns the "outputs" section of the --json report (grid, images, latents, array).
nlohmann::json write_generate_outputs(const Args& args, const std::string& out, const GenerationRequest& req,
                                      const GenerationResult& result, const StableDiffusionModel& model, int scale,
                                      FILE* info);

// The --json report: settings, nsfw_flagged, load_seconds, runs (each call's timings), warnings
// and outputs.
nlohmann::json generate_json(const GenerationRequest& req, const GenerationResult& result,
                             const StableDiffusionModel& model, bool models_own_scheduler, double load_seconds,
                             const nlohmann::json& runs, const nlohmann::json& outputs);

}  // namespace octodiff::cli
