// Comparison sheets (A1111's "X/Y/Z plot"): one prompt, up to three axes that each vary one
// setting, one image per cell.
//
//   axis   NAME=V1,V2,…  with NAME one of
//          seed       integers, or ranges A-B (10-13)
//          guidance   numbers (the guidance scale)
//          steps      integers in 1…1000
//          scheduler  pndm, ddim, lms, dpm++, euler, euler-a, lcm, and lms-karras, dpm++-karras,
//                     euler-karras, dpm++-sde-karras (Karras sigmas on; the plain lms, dpm++,
//                     dpm++-sde and euler turn them off)
//          strength   image-to-image strength in (0, 1] (needs an init image)
//          lora       strength of the request's first LoRA (StableDiffusionModel::with_loras)
//          guidance-rescale  numbers in [0, 1] (GenerationRequest::guidance_rescale, φ)
//          clip-skip  integers in 1…kMaxClipSkip (GenerationRequest::clip_skip; the model's text encoder
//                     bounds it further when the cell runs)
//          prompt     Prompt S/R as A1111: the first value is the search string and its cell keeps
//                     the prompt as it is; every other value replaces every occurrence of it in
//                     the prompt and the negative prompt (it must occur in one of them)
//          Values are separated by commas; a value holding a comma is quoted ("a, b"), a quote
//          in a quoted value doubled ("").
//
// Every cell equals the single run with that cell's settings — one prompt, one device, one
// image, its seed — bit for bit. Cells that differ only in seed and prompt share one sharded run
// (one device each, up to SheetPlanOptions::max_devices): a single run with seed s draws all its
// noise (initial latents, image-to-image posterior noise, stochastic schedulers' step noise) from
// the key split(PRNGKey(s), 1)[0], and a sharded run's device d from split(PRNGKey(seed), D)[d],
// which differs; so the sheet gives each device its cell's single-run key
// (GenerationRequest::device_keys) and the device draws exactly what that single run draws. A
// device's computation does not depend on the other devices nor on the threads it gets, so its
// image is the single run's (comparison_sheet_test checks it with memcmp). Cells that differ in
// guidance, guidance rescale, steps, scheduler, strength, LoRA strength or clip skip run separately (another
// scale, Signature or text encoding; runs with the same Signature reuse the compiled plan; LoRA strengths
// another model).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "pipeline/generation.h"
#include "pipeline/metadata.h"
#include "pipeline/sharded_pipeline.h"

namespace octodiff {

enum class SheetAxisKind {
  Seed,
  Guidance,
  Steps,
  Scheduler,
  Strength,
  Lora,
  Prompt,
  ClipSkip,
  GuidanceRescale
};

struct SheetValue {
  std::string text;  // as written (the prompt axis: the search or replacement string)
  double number = 0;     // guidance, guidance rescale, strength, lora
  int64_t integer = 0;   // seed, steps
  SchedulerKind scheduler = SchedulerKind::Pndm;
  std::optional<bool> karras_sigmas;  // scheduler: on for "…-karras", off for lms, dpm++, euler
};

struct SheetAxis {
  SheetAxisKind kind = SheetAxisKind::Seed;
  std::vector<SheetValue> values;  // at least one
  int size() const { return static_cast<int>(values.size()); }
  // "seed 2", "guidance 7.5", "dpm++", "prompt: red" — what the sheet writes beside a row or column.
  std::string label(int i) const;
};

constexpr int kMaxSheetCells = 64;

// "NAME=V1,V2,…"; throws octodiff::Error naming the axis and the value for bad input (unknown
// name, no or empty values, a number that does not parse, steps or strength out of range, an
// unknown scheduler).
SheetAxis parse_sheet_axis(const std::string& text);
std::string sheet_axis_name(SheetAxisKind kind);
std::vector<std::string> sheet_axis_names();

// X, then optionally Y and Z (axes[0..2]).
struct SheetSpec {
  std::vector<SheetAxis> axes;
  int size(int axis) const { return axis < static_cast<int>(axes.size()) ? axes[axis].size() : 1; }
  int cells() const { return size(0) * size(1) * size(2); }
};

// From the --x, --y, --z texts (y and z may be empty: no such axis; z needs y). Throws for more
// than kMaxSheetCells cells and for an axis other than prompt given twice.
SheetSpec parse_sheet_spec(const std::string& x, const std::string& y = {}, const std::string& z = {});

struct SheetCell {
  int x = 0, y = 0, z = 0;
  // The single run this cell equals: one prompt, one device, one image.
  GenerationRequest request;
  std::optional<float> lora_strength;  // the first LoRA's strength when the lora axis sets it
  jax::Key key;                        // split(PRNGKey(seed), 1)[0]: the single run's device key
};

// One pipeline run of a sheet: device d draws cell cells[d].
struct SheetRun {
  GenerationRequest request;  // devices = cells.size(), device_keys = those cells' keys
  std::vector<int> cells;
  std::optional<float> lora_strength;
};

struct SheetPlan {
  SheetSpec spec;
  std::vector<SheetCell> cells;  // cell (x, y, z) at index (z·Y + y)·X + x
  std::vector<SheetRun> runs;
  int cell_index(int x, int y, int z) const { return (z * spec.size(1) + y) * spec.size(0) + x; }
};

struct SheetPlanOptions {
  int max_devices = 8;  // cells per sharded run (1: every cell its own run)
};

// Expands the sheet over `base` (one prompt, at most one negative prompt and one init image, no
// injected noise, devices and batch per device 1 or unset) and groups its cells into runs.
// Throws octodiff::Error for a base the sheet cannot vary (several prompts, a lora axis without a
// LoRA, a strength axis without an init image, a prompt S/R search string found nowhere).
// `base_lora_count`: how many LoRAs the model has (the lora axis sets the first one's strength).
SheetPlan plan_sheet(const SheetSpec& spec, const GenerationRequest& base, int base_lora_count,
                     const SheetPlanOptions& options = {});

struct SheetRunResult {
  GenerationResult result;
  std::shared_ptr<const StableDiffusionModel> model;  // the model it ran on (its LoRA strength)
};

struct SheetResult {
  SheetPlan plan;
  std::vector<SheetRunResult> runs;  // as plan.runs
  Tensor images;                     // (Z, Y, X, H, W, 3) float32 in [0, 1]
  int cell_run(int cell) const;      // the run that made the cell
  int cell_device(int cell) const;   // its device in that run
  Tensor cell_image(int cell) const; // (H, W, 3)
};

struct SheetCallbacks {
  std::function<void(int run, int runs, const SheetRun&)> run_started;
  ProgressCallback progress;
  PreviewCallback preview;
  std::function<void(int run, const SheetRunResult&)> run_finished;
};

// Runs sheets on a model (the base request's, with its LoRAs); plans are cached per model, and a
// model per LoRA strength is made once (StableDiffusionModel::with_loras: only the LoRA's layers
// are packed again).
class SheetRunner {
 public:
  explicit SheetRunner(std::shared_ptr<ShardedPipeline> pipeline);
  const StableDiffusionModel& model() const { return base_->model(); }
  // Throws octodiff::Cancelled when `cancel` is set, octodiff::Error for failures.
  SheetResult run(const SheetPlan& plan, const SheetCallbacks& callbacks = {}, const CancelToken* cancel = nullptr);

 private:
  ShardedPipeline& pipeline_for(const std::optional<float>& lora_strength);
  std::shared_ptr<ShardedPipeline> base_;
  std::map<float, std::shared_ptr<ShardedPipeline>> lora_pipelines_;
};

// The labelled sheet PNG's text chunk "octodiff-sheet": JSON with the prompt, each axis's name
// and values, the numbers of cells and runs.
std::vector<PngText> sheet_png_texts(const SheetResult& sheet);
// Every cell as 8-bit RGB, in plan order.
std::vector<Image8> sheet_cell_images(const SheetResult& sheet);
// The metadata of cell `cell`: that of the single run it equals (seed, prompt, device 0 of 1 and
// its key), so a reopened cell PNG reproduces it.
ImageMetadata describe_sheet_cell(const SheetResult& sheet, int cell);
// Writes <dir>/<prefix>-<cell number>-x<i>-y<j>[-z<k>].png per cell (cell number from 1 in
// plan order) with its metadata; returns the paths.
std::vector<std::filesystem::path> save_sheet_cell_pngs(const std::filesystem::path& dir, const SheetResult& sheet,
                                                        const std::string& prefix = "cell", int scale = 1);

}  // namespace octodiff
