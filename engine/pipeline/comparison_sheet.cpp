#include "pipeline/comparison_sheet.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/model.h"

namespace octodiff {
namespace {

struct AxisName {
  SheetAxisKind kind;
  const char* name;
};
constexpr AxisName kAxisNames[] = {
    {SheetAxisKind::Seed, "seed"},
    {SheetAxisKind::Guidance, "guidance"},
    {SheetAxisKind::Steps, "steps"},
    {SheetAxisKind::Scheduler, "scheduler"},
    {SheetAxisKind::Strength, "strength"},
    {SheetAxisKind::Lora, "lora"},
    {SheetAxisKind::Prompt, "prompt"},
    {SheetAxisKind::ClipSkip, "clip-skip"},
    {SheetAxisKind::GuidanceRescale, "guidance-rescale"},
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// Comma-separated values, CSV-style quoting ("a, b" and "" for a quote inside), each trimmed
// outside the quotes.
std::vector<std::string> split_values(const std::string& text, const std::string& axis) {
  std::vector<std::string> values;
  std::string current;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        current += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        current += c;
      }
    } else if (c == '"' && trim(current).empty()) {
      quoted = was_quoted = true;
      current.clear();
    } else if (c == ',') {
      values.push_back(was_quoted ? current : trim(current));
      current.clear();
      was_quoted = false;
    } else if (!was_quoted || !std::isspace(static_cast<unsigned char>(c))) {
      if (was_quoted) fail("the ", axis, " axis: text after a quoted value in '", text, "'");
      current += c;
    }
  }
  if (quoted) fail("the ", axis, " axis: a quote is not closed in '", text, "'");
  values.push_back(was_quoted ? current : trim(current));
  return values;
}

double parse_number(const std::string& text, const std::string& axis) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v))
    fail("the ", axis, " axis: '", text, "' is not a number");
  return v;
}

int64_t parse_integer(const std::string& text, const std::string& axis) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end) fail("the ", axis, " axis: '", text, "' is not a whole number");
  return v;
}

// One written value of an integer axis: N, or a range A-B (both ends included).
void add_integers(const std::string& text, const std::string& axis, std::vector<SheetValue>& out) {
  static const std::regex range(R"((\d+)\s*-\s*(\d+))");
  std::smatch m;
  if (!std::regex_match(text, m, range)) {
    out.push_back({text, 0, parse_integer(text, axis), {}, {}});
    return;
  }
  const int64_t a = parse_integer(m[1], axis), b = parse_integer(m[2], axis);
  if (b < a || b - a >= kMaxSheetCells)
    fail("the ", axis, " axis: the range '", text, "' is reversed or longer than ", kMaxSheetCells);
  for (int64_t v = a; v <= b; ++v) out.push_back({std::to_string(v), 0, v, {}, {}});
}

SheetValue parse_value(SheetAxisKind kind, const std::string& text, const std::string& axis) {
  SheetValue v{text, 0, 0, {}, {}};
  switch (kind) {
    case SheetAxisKind::Guidance:
    case SheetAxisKind::Lora:
      v.number = parse_number(text, axis);
      break;
    case SheetAxisKind::Strength:
      v.number = parse_number(text, axis);
      if (!(v.number > 0 && v.number <= 1)) fail("the strength axis: ", text, " is not in (0, 1]");
      break;
    case SheetAxisKind::GuidanceRescale:
      v.number = parse_number(text, axis);
      if (!(v.number >= 0 && v.number <= 1)) fail("the guidance-rescale axis: ", text, " is not in [0, 1]");
      break;
    case SheetAxisKind::Scheduler: {
      const std::string suffix = "-karras";
      const bool karras =
          text.size() > suffix.size() && lowercase(text.substr(text.size() - suffix.size())) == suffix;
      v.scheduler = parse_scheduler_kind(karras ? text.substr(0, text.size() - suffix.size()) : text);
      if (karras && !supports_karras_sigmas(v.scheduler))
        fail("the scheduler axis: ", text, ": only lms, dpm++, dpm++-sde and euler have Karras sigmas");
      if (supports_karras_sigmas(v.scheduler)) v.karras_sigmas = karras;
      break;
    }
    default:
      break;
  }
  return v;
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

std::string sheet_axis_name(SheetAxisKind kind) {
  for (const auto& a : kAxisNames)
    if (a.kind == kind) return a.name;
  return "?";
}

std::vector<std::string> sheet_axis_names() {
  std::vector<std::string> names;
  for (const auto& a : kAxisNames) names.push_back(a.name);
  return names;
}

std::string SheetAxis::label(int i) const {
  const SheetValue& v = values.at(i);
  switch (kind) {
    case SheetAxisKind::Seed: return cat("seed ", v.integer);
    case SheetAxisKind::Guidance: return cat("guidance ", number_text(v.number));
    case SheetAxisKind::Steps: return cat(v.integer, " steps");
    case SheetAxisKind::Scheduler:
      return scheduler_name(v.scheduler) + (v.karras_sigmas.value_or(false) ? " karras" : "");
    case SheetAxisKind::Strength: return cat("strength ", number_text(v.number));
    case SheetAxisKind::Lora: return cat("LoRA ", number_text(v.number));
    case SheetAxisKind::Prompt: return v.text.empty() ? std::string("(removed)") : v.text;
    case SheetAxisKind::ClipSkip: return cat("clip skip ", v.integer);
    case SheetAxisKind::GuidanceRescale:
      return cat("CFG rescale ", number_text(v.number));
  }
  return v.text;
}

SheetAxis parse_sheet_axis(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos)
    fail("a sheet axis is NAME=V1,V2,… (e.g. guidance=3,7.5), got '", text, "'");
  const std::string name = trim(text.substr(0, eq));
  SheetAxis axis;
  bool known = false;
  for (const auto& a : kAxisNames)
    if (name == a.name) {
      axis.kind = a.kind;
      known = true;
    }
  if (!known) {
    std::string names;
    for (const auto& n : sheet_axis_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown sheet axis '", name, "' (valid: ", names, ")");
  }
  const std::string values = text.substr(eq + 1);
  if (trim(values).empty()) fail("the ", name, " axis has no values (give ", name, "=V1,V2,…)");
  for (const std::string& value : split_values(values, name)) {
    if (value.empty() && axis.kind != SheetAxisKind::Prompt)
      fail("the ", name, " axis has an empty value in '", values, "'");
    if (axis.kind == SheetAxisKind::Seed || axis.kind == SheetAxisKind::Steps ||
        axis.kind == SheetAxisKind::ClipSkip)
      add_integers(value, name, axis.values);
    else
      axis.values.push_back(parse_value(axis.kind, value, name));
  }
  if (axis.kind == SheetAxisKind::Steps)
    for (const SheetValue& v : axis.values)
      if (v.integer < 1 || v.integer > 1000) fail("the steps axis: ", v.integer, " is not in 1…1000");
  if (axis.kind == SheetAxisKind::ClipSkip)
    for (const SheetValue& v : axis.values)
      if (v.integer < 1 || v.integer > kMaxClipSkip)
        fail("the clip-skip axis: ", v.integer, " is not in 1…", kMaxClipSkip);
  if (axis.kind == SheetAxisKind::Prompt && axis.values[0].text.empty())
    fail("the prompt axis: its first value is the text to search for and cannot be empty");
  if (axis.size() > kMaxSheetCells) fail("the ", name, " axis has ", axis.size(), " values; at most ", kMaxSheetCells);
  return axis;
}

SheetSpec parse_sheet_spec(const std::string& x, const std::string& y, const std::string& z) {
  if (trim(x).empty()) fail("a sheet needs an X axis (--x NAME=V1,V2,…)");
  if (!trim(z).empty() && trim(y).empty()) fail("a sheet with a Z axis needs a Y axis too");
  SheetSpec spec;
  for (const std::string* text : {&x, &y, &z})
    if (!trim(*text).empty()) spec.axes.push_back(parse_sheet_axis(*text));
  for (size_t i = 0; i < spec.axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (spec.axes[i].kind == spec.axes[j].kind && spec.axes[i].kind != SheetAxisKind::Prompt)
        fail("the ", sheet_axis_name(spec.axes[i].kind), " axis is given twice");
  int64_t cells = 1;
  for (const SheetAxis& a : spec.axes) cells *= a.size();
  if (cells > kMaxSheetCells) {
    std::string dims;
    for (const SheetAxis& a : spec.axes) dims += cat(dims.empty() ? "" : " × ", a.size());
    fail("the sheet has ", dims, " = ", cells, " cells; at most ", kMaxSheetCells);
  }
  return spec;
}

// ---------------------------------------------------------------------------------------------
// Planning.

namespace {

void replace_all(std::string& s, const std::string& search, const std::string& replacement) {
  for (size_t at = s.find(search); at != std::string::npos; at = s.find(search, at + replacement.size()))
    s.replace(at, search.size(), replacement);
}

void check_sheet_base(const GenerationRequest& base) {
  if (base.prompts.size() != 1)
    fail("a comparison sheet varies one prompt; ", base.prompts.size(), " were given");
  if (base.negative_prompts.size() > 1) fail("a comparison sheet takes at most one negative prompt");
  if (base.devices > 1 || base.batch_per_device != 1)
    fail("a comparison sheet makes one image per cell (one device, batch 1); its cells are the devices");
  if (base.latents || base.step_noise || base.posterior_noise || !base.device_keys.empty())
    fail("a comparison sheet draws each cell's noise from its seed; injected latents or noise are not supported");
  if (base.init_images.size() > 1) fail("a comparison sheet takes at most one init image (for every cell)");
  if (!base.masks.empty()) fail("a comparison sheet does not take masks");
}

// Sets one axis value on a cell's request.
void apply_value(const SheetAxis& axis, int i, SheetCell& cell) {
  const SheetValue& v = axis.values.at(i);
  GenerationRequest& r = cell.request;
  switch (axis.kind) {
    case SheetAxisKind::Seed: r.seed = v.integer; break;
    case SheetAxisKind::Guidance: r.guidance_scale = v.number; break;
    case SheetAxisKind::Steps: r.steps = static_cast<int>(v.integer); break;
    case SheetAxisKind::Scheduler:
      r.scheduler = v.scheduler;
      r.karras_sigmas = v.karras_sigmas;
      break;
    case SheetAxisKind::Strength: r.strength = v.number; break;
    case SheetAxisKind::Lora: cell.lora_strength = static_cast<float>(v.number); break;
    case SheetAxisKind::ClipSkip: r.clip_skip = static_cast<int>(v.integer); break;
    case SheetAxisKind::GuidanceRescale:
      r.guidance_rescale = v.number;
      break;
    case SheetAxisKind::Prompt:
      if (i == 0) break;
      replace_all(r.prompts[0], axis.values[0].text, v.text);
      for (std::string& n : r.negative_prompts) replace_all(n, axis.values[0].text, v.text);
      break;
  }
}

void check_axis_fits(const SheetAxis& axis, const GenerationRequest& base, int base_lora_count) {
  if (axis.kind == SheetAxisKind::Lora && base_lora_count == 0)
    fail("the lora axis sets the strength of the model's first LoRA, but no LoRA is loaded (give --lora FILE)");
  if (axis.kind == SheetAxisKind::Strength && base.init_images.empty())
    fail("the strength axis is for image-to-image: give an init image");
  if (axis.kind == SheetAxisKind::Prompt) {
    const std::string& search = axis.values[0].text;
    const bool in_negative = !base.negative_prompts.empty() && base.negative_prompts[0].find(search) != std::string::npos;
    if (base.prompts[0].find(search) == std::string::npos && !in_negative)
      fail("Prompt S/R did not find '", search, "' in the prompt or the negative prompt");
  }
}

// What a run shares: everything but seed and prompts (a device each).
std::string run_key(const SheetCell& c) {
  const GenerationRequest& r = c.request;
  char text[160];
  std::snprintf(text, sizeof text, "%d|%a|%a|%d|%d|%a|%a|%d", r.steps, r.guidance_scale, r.guidance_rescale,
                r.scheduler ? static_cast<int>(*r.scheduler) : -1,
                r.karras_sigmas ? int{*r.karras_sigmas} : -1, r.strength,
                c.lora_strength ? static_cast<double>(*c.lora_strength) : -1e300, r.clip_skip);
  return text;
}

SheetRun make_run(const SheetPlan& plan, const std::vector<int>& cells) {
  SheetRun run;
  run.cells = cells;
  const SheetCell& first = plan.cells[cells[0]];
  run.lora_strength = first.lora_strength;
  run.request = first.request;
  run.request.devices = static_cast<int>(cells.size());
  run.request.prompts.clear();
  run.request.negative_prompts.clear();
  for (int c : cells) {
    const GenerationRequest& r = plan.cells[c].request;
    run.request.prompts.push_back(r.prompts[0]);
    run.request.negative_prompts.push_back(r.negative_prompts.empty() ? std::string() : r.negative_prompts[0]);
    run.request.device_keys.push_back(plan.cells[c].key);
  }
  return run;
}

}  // namespace

SheetPlan plan_sheet(const SheetSpec& spec, const GenerationRequest& base, int base_lora_count,
                     const SheetPlanOptions& options) {
  if (spec.axes.empty()) fail("a sheet needs an X axis");
  if (spec.cells() > kMaxSheetCells) fail("the sheet has ", spec.cells(), " cells; at most ", kMaxSheetCells);
  if (options.max_devices < 1) fail("a sheet run needs at least one device");
  check_sheet_base(base);
  for (const SheetAxis& axis : spec.axes) check_axis_fits(axis, base, base_lora_count);
  SheetPlan plan;
  plan.spec = spec;
  const int X = spec.size(0), Y = spec.size(1), Z = spec.size(2);
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        SheetCell cell;
        cell.x = x, cell.y = y, cell.z = z;
        cell.request = base;
        cell.request.devices = 1;
        const int at[3] = {x, y, z};
        for (size_t a = 0; a < spec.axes.size(); ++a) apply_value(spec.axes[a], at[a], cell);
        cell.key = jax::split(jax::prng_key(cell.request.seed), 1, cell.request.rng)[0];
        plan.cells.push_back(std::move(cell));
      }
  // Cells with the same run key share runs of up to max_devices cells, in order of first appearance.
  std::vector<std::vector<int>> groups;
  std::map<std::string, size_t> open;  // run key → the group still taking its cells
  for (int c = 0; c < static_cast<int>(plan.cells.size()); ++c) {
    const std::string key = run_key(plan.cells[c]);
    auto it = open.find(key);
    if (it == open.end() || static_cast<int>(groups[it->second].size()) >= options.max_devices) {
      open[key] = groups.size();
      groups.push_back({c});
    } else {
      groups[it->second].push_back(c);
    }
  }
  for (const auto& g : groups) plan.runs.push_back(make_run(plan, g));
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Running.

int SheetResult::cell_run(int cell) const {
  for (size_t k = 0; k < plan.runs.size(); ++k)
    for (int c : plan.runs[k].cells)
      if (c == cell) return static_cast<int>(k);
  fail("cell ", cell, " is in no run of the sheet");
}

int SheetResult::cell_device(int cell) const {
  const auto& cells = plan.runs.at(cell_run(cell)).cells;
  return static_cast<int>(std::find(cells.begin(), cells.end(), cell) - cells.begin());
}

Tensor SheetResult::cell_image(int cell) const {
  const int64_t H = images.dim(3), W = images.dim(4);
  Tensor out = Tensor::empty({H, W, 3});
  std::memcpy(out.data(), images.data() + cell * H * W * 3, sizeof(float) * H * W * 3);
  return out;
}

SheetRunner::SheetRunner(std::shared_ptr<ShardedPipeline> pipeline) : base_(std::move(pipeline)) {
  if (!base_) fail("SheetRunner needs a pipeline");
}

ShardedPipeline& SheetRunner::pipeline_for(const std::optional<float>& lora_strength) {
  if (!lora_strength) return *base_;
  auto it = lora_pipelines_.find(*lora_strength);
  if (it != lora_pipelines_.end()) return *it->second;
  const auto& model = base_->model_ptr();
  std::vector<LoraSpec> loras;
  for (const AppliedLora& l : model->loras()) loras.push_back(l.spec);
  if (loras.empty()) fail("the lora axis needs a model with a LoRA");
  if (loras[0].strength == *lora_strength) return *base_;
  loras[0].strength = *lora_strength;
  auto pipe = std::make_shared<ShardedPipeline>(StableDiffusionModel::with_loras(model, loras));
  return *(lora_pipelines_[*lora_strength] = pipe);
}

SheetResult SheetRunner::run(const SheetPlan& plan, const SheetCallbacks& callbacks, const CancelToken* cancel) {
  SheetResult sheet;
  sheet.plan = plan;
  const int runs = static_cast<int>(plan.runs.size());
  for (int k = 0; k < runs; ++k) {
    if (cancel && cancel->cancelled()) throw Cancelled();
    if (callbacks.run_started) callbacks.run_started(k, runs, plan.runs[k]);
    ShardedPipeline& pipe = pipeline_for(plan.runs[k].lora_strength);
    SheetRunResult r{pipe.run(plan.runs[k].request, callbacks.progress, callbacks.preview, cancel), pipe.model_ptr()};
    if (sheet.images.numel() == 0) {
      const Signature& s = r.result.signature;
      sheet.images = Tensor::empty({plan.spec.size(2), plan.spec.size(1), plan.spec.size(0), s.height, s.width, 3});
    }
    const int64_t n = sheet.images.dim(3) * sheet.images.dim(4) * 3;
    if (r.result.images.numel() != n * static_cast<int64_t>(plan.runs[k].cells.size()))
      fail("sheet run ", k + 1, " made images of another size than the first run's");
    for (size_t d = 0; d < plan.runs[k].cells.size(); ++d)
      std::memcpy(sheet.images.data() + plan.runs[k].cells[d] * n, r.result.images.data() + d * n, sizeof(float) * n);
    sheet.runs.push_back(std::move(r));
    if (callbacks.run_finished) callbacks.run_finished(k, sheet.runs.back());
  }
  return sheet;
}

// ---------------------------------------------------------------------------------------------
// Metadata and files.

std::vector<PngText> sheet_png_texts(const SheetResult& sheet) {
  nlohmann::json axes = nlohmann::json::array();
  const char* names[] = {"x", "y", "z"};
  for (size_t a = 0; a < sheet.plan.spec.axes.size(); ++a) {
    const SheetAxis& axis = sheet.plan.spec.axes[a];
    nlohmann::json values = nlohmann::json::array();
    for (const SheetValue& v : axis.values) values.push_back(v.text);
    axes.push_back({{"axis", names[a]}, {"name", sheet_axis_name(axis.kind)}, {"values", values}});
  }
  const GenerationRequest& first = sheet.plan.cells.at(0).request;
  nlohmann::json j = {{"generator", "octodiff"}, {"version", OCTODIFF_VERSION},    {"prompt", first.prompts.at(0)},
                      {"axes", axes},           {"cells", sheet.plan.cells.size()}, {"runs", sheet.plan.runs.size()}};
  return {{"octodiff-sheet", j.dump()}};
}

std::vector<Image8> sheet_cell_images(const SheetResult& sheet) {
  std::vector<Image8> images;
  for (int i = 0; i < static_cast<int>(sheet.plan.cells.size()); ++i) {
    const Tensor im = sheet.cell_image(i);
    images.push_back(to_uint8(im.data(), static_cast<int>(im.dim(0)), static_cast<int>(im.dim(1))));
  }
  return images;
}

ImageMetadata describe_sheet_cell(const SheetResult& sheet, int cell) {
  const SheetCell& c = sheet.plan.cells.at(cell);
  const SheetRunResult& run = sheet.runs.at(sheet.cell_run(cell));
  const int d = sheet.cell_device(cell);
  // The single run this cell equals: one device, the cell's key, its prompt.
  GenerationResult single;
  single.signature = run.result.signature;
  single.signature.devices = 1;
  single.prompts = {run.result.prompts.at(d)};
  single.negative_prompts = {run.result.negative_prompts.at(d)};
  single.device_keys = {c.key};
  return describe_image(c.request, single, *run.model, 0, 0);
}

std::vector<std::filesystem::path> save_sheet_cell_pngs(const std::filesystem::path& dir, const SheetResult& sheet,
                                                        const std::string& prefix, int scale) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create folder '", dir.string(), "': ", ec.message());
  std::vector<std::filesystem::path> paths;
  const bool has_z = sheet.plan.spec.axes.size() > 2;
  const std::vector<Image8> images = sheet_cell_images(sheet);
  for (int i = 0; i < static_cast<int>(sheet.plan.cells.size()); ++i) {
    const SheetCell& c = sheet.plan.cells[i];
    Image8 image = images[i];
    if (scale > 1) image = upscale_nearest(image, scale);
    const auto p = dir / cat(prefix, "-", i + 1, "-x", c.x + 1, "-y", c.y + 1, has_z ? cat("-z", c.z + 1) : "", ".png");
    write_png(p, image, png_texts(describe_sheet_cell(sheet, i)));
    paths.push_back(p);
  }
  return paths;
}

}  // namespace octodiff
