// octodiff-cli generate --x NAME=V1,… [--y …] [--z …]: a comparison sheet
// (pipeline/comparison_sheet.h) instead of a grid.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>

#include "args.h"
#include "pipeline/comparison_sheet.h"
#include "pipeline/model.h"

namespace octodiff::cli {

extern const char* kSheetUsage;

// The sheet the options ask for (nullopt: no --x/--y/--z); throws for bad axes and for generate
// options a sheet does not take (--devices, --batch-per-device, --latents, --save-latents,
// --noise, --posterior-noise, --repeat, several --prompt). Called before the model loads.
std::optional<SheetSpec> sheet_from_args(const Args& args);

// Runs the sheet over `base` on `model` and writes: every cell as a PNG with the metadata of the
// single run it equals (--out-dir, default <out>-cells/), the labelled sheet (--out, default
// octodiff-sheet-<seed>.png), --save-array as (Z, Y, X, H, W, 3) float32, --json a summary.
int run_sheet(const Args& args, const SheetSpec& spec, const GenerationRequest& base,
              const std::shared_ptr<const StableDiffusionModel>& model, FILE* info);

}  // namespace octodiff::cli
