#include "sheet_command.h"

#include <unistd.h>

#include <filesystem>
#include <future>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "io/png.h"
#ifdef OCTODIFF_CLI_LABELLED_SHEET
#include "sheet_render.h"
#endif

namespace octodiff::cli {

const char* kSheetUsage =
    "comparison sheets (one prompt, one image per cell, each equal to the single run with its settings):\n"
    "  --x NAME=V1,V2,...        the X axis; NAME: seed (N or A-B), guidance, steps, scheduler\n"
    "                            (dpm++-karras, dpm++-sde-karras, euler-karras, lms-karras: with\n"
    "                            Karras sigmas),\n"
    "                            strength (with --init-image), lora (the first --lora's strength),\n"
    "                            clip-skip (N or A-B), guidance-rescale (0..1),\n"
    "                            prompt (Prompt S/R: the first value is\n"
    "                            searched for, the others replace it); quote a value holding a\n"
    "                            comma: prompt=red,\"pale, blue\"\n"
    "  --y NAME=..., --z NAME=...  the Y and Z axes (at most 64 cells in all)\n"
    "  with an axis: --out is the labelled sheet (default octodiff-sheet-<seed>.png), --out-dir the\n"
    "  cells with their metadata (default: <out>-cells), --save-array (Z, Y, X, H, W, 3)\n";

namespace {

namespace fs = std::filesystem;

void refuse_grid_options(const Args& args) {
  for (const char* name : {"devices", "batch-per-device", "latents", "save-latents", "noise", "posterior-noise",
                           "repeat"})
    if (args.get(name)) fail("--", name, " does not go with a comparison sheet (--x/--y/--z): its cells are the devices");
  if (args.all("prompt").size() > 1)
    fail("a comparison sheet varies one --prompt (use a prompt=SEARCH,REPLACEMENT,... axis for more)");
}

#ifdef OCTODIFF_CLI_LABELLED_SHEET
std::vector<std::string> axis_labels(const SheetSpec& spec, int axis) {
  std::vector<std::string> labels;
  if (axis < static_cast<int>(spec.axes.size()))
    for (int i = 0; i < spec.axes[axis].size(); ++i) labels.push_back(spec.axes[axis].label(i));
  return labels;
}
#endif

// The labelled sheet: text drawn with Qt when the CLI is built with the app, else the bare grid.
Image8 sheet_picture(const SheetResult& sheet, int scale, FILE* info) {
  const SheetSpec& spec = sheet.plan.spec;
  std::vector<Image8> cells = sheet_cell_images(sheet);
#ifdef OCTODIFF_CLI_LABELLED_SHEET
  static_cast<void>(info);
  gui::LabelledSheet labelled{spec.size(0), spec.size(1), spec.size(2), std::move(cells), axis_labels(spec, 0),
                              axis_labels(spec, 1), axis_labels(spec, 2)};
  return gui::render_labelled_sheet(labelled, scale);
#else
  std::fprintf(info, "note: this octodiff-cli was built without Qt (OCTODIFF_BUILD_GUI=OFF): the sheet has no labels\n");
  const int cols = spec.size(0) * spec.size(2);  // Z pages side by side
  std::vector<Image8> ordered;
  for (int y = 0; y < spec.size(1); ++y)
    for (int z = 0; z < spec.size(2); ++z)
      for (int x = 0; x < spec.size(0); ++x) ordered.push_back(cells[sheet.plan.cell_index(x, y, z)]);
  Image8 grid = make_grid(ordered, spec.size(1), cols);
  return scale > 1 ? upscale_nearest(grid, scale) : grid;
#endif
}

SheetCallbacks progress_callbacks(FILE* info, bool quiet) {
  SheetCallbacks callbacks;
  callbacks.run_started = [info](int k, int runs, const SheetRun& run) {
    std::fprintf(info, "run %d/%d: %zu cell%s as devices, guidance %g, %d steps\n", k + 1, runs, run.cells.size(),
                 run.cells.size() == 1 ? "" : "s", run.request.guidance_scale, run.request.steps);
  };
  callbacks.run_finished = [info](int, const SheetRunResult& r) {
    std::fprintf(info, "  %s, %s in %.2f s\n", r.result.signature.str().c_str(),
                 r.result.compiled ? "compiled" : "cached plan", r.result.timings.total);
    for (const auto& w : r.result.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };
  if (!quiet && isatty(STDERR_FILENO))
    callbacks.progress = [](const ProgressEvent& e) {
      if (e.phase == Phase::Denoise)
        std::fprintf(stderr, "\r  device %d  step %d/%d   ", e.device + 1, e.step, e.total_steps);
    };
  return callbacks;
}

nlohmann::json cells_json(const SheetResult& sheet, const std::vector<fs::path>& paths) {
  nlohmann::json cells = nlohmann::json::array();
  for (size_t i = 0; i < sheet.plan.cells.size(); ++i) {
    const SheetCell& c = sheet.plan.cells[i];
    cells.push_back({{"x", c.x}, {"y", c.y}, {"z", c.z}, {"seed", c.request.seed},
                     {"prompt", c.request.prompts[0]}, {"guidance_scale", c.request.guidance_scale},
                     {"steps", c.request.steps}, {"run", sheet.cell_run(static_cast<int>(i))},
                     {"device", sheet.cell_device(static_cast<int>(i))}, {"file", paths[i].string()}});
  }
  return cells;
}

}  // namespace

std::optional<SheetSpec> sheet_from_args(const Args& args) {
  if (!args.get("x") && !args.get("y") && !args.get("z")) return std::nullopt;
  if (!args.get("x")) fail("a comparison sheet needs --x (then --y, --z)");
  refuse_grid_options(args);
  return parse_sheet_spec(*args.get("x"), args.get_or("y", ""), args.get_or("z", ""));
}

int run_sheet(const Args& args, const SheetSpec& spec, const GenerationRequest& base,
              const std::shared_ptr<const StableDiffusionModel>& model, FILE* info) {
  const SheetPlan plan = plan_sheet(spec, base, static_cast<int>(model->loras().size()));
  const int scale = args.get_int("scale", 1, 1, 16);
  const fs::path out = args.get_or("out", "octodiff-sheet-" + std::to_string(base.seed) + ".png");
  const fs::path cells_dir = args.get_or("out-dir", (out.parent_path() / (out.stem().string() + "-cells")).string());
  std::fprintf(info, "sheet: %d × %d × %d = %zu cells in %zu runs\n", spec.size(0), spec.size(1), spec.size(2),
               plan.cells.size(), plan.runs.size());
  auto hashing = std::async(std::launch::async, [model] { return model->model_hash(); });
  SheetRunner runner(std::make_shared<ShardedPipeline>(model));
  const SheetResult sheet = runner.run(plan, progress_callbacks(info, args.flag("quiet")));
  hashing.wait();

  const auto paths = save_sheet_cell_pngs(cells_dir, sheet, "cell", scale);
  std::fprintf(info, "wrote %zu cells to %s\n", paths.size(), cells_dir.string().c_str());
  write_png(out, sheet_picture(sheet, scale, info), sheet_png_texts(sheet));
  std::fprintf(info, "wrote %s\n", out.string().c_str());
  nlohmann::json outputs = {{"sheet", out.string()}, {"cells_dir", cells_dir.string()}};
  if (auto p = args.get("save-array")) {
    write_npy(*p, sheet.images);
    std::fprintf(info, "wrote images %s (Z, Y, X, H, W, 3) to %s\n", shape_str(sheet.images.shape()).c_str(),
                 p->c_str());
    outputs["array"] = *p;
  }
  model->wait_for_weight_caches();
  if (args.flag("json")) {
    nlohmann::json j = {{"cells", cells_json(sheet, paths)}, {"runs", plan.runs.size()}, {"outputs", outputs}};
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace octodiff::cli
