#include "sheet_runs.h"

#include <QDateTime>

#include "pipeline/export.h"

namespace octodiff::gui {

std::shared_ptr<RunRecord> sheetRunRecord(const SheetPlan& plan, int run, const SheetRunResult& result) {
  auto record = std::make_shared<RunRecord>();
  record->kind = JobKind::Sheet;
  record->index_in_job = run;
  record->runs_in_job = static_cast<int>(plan.runs.size());
  record->finished_at = QDateTime::currentDateTime();
  record->request = plan.runs.at(run).request;
  record->result = result.result;
  record->model = result.model;
  for (const Image8& im : result_images(result.result)) record->images.push_back(toQImage(im));
  return record;
}

RunPtr sheetCellRun(const SheetPlan& plan, int cell, const RunRecord& run, int device) {
  const SheetCell& c = plan.cells.at(cell);
  auto out = std::make_shared<RunRecord>();
  out->number = run.number;
  out->kind = JobKind::Sheet;
  out->index_in_job = run.index_in_job;
  out->runs_in_job = run.runs_in_job;
  out->finished_at = run.finished_at;
  out->request = c.request;
  out->model = run.model;
  const GenerationResult& all = run.result;
  GenerationResult& one = out->result;
  one.signature = all.signature;
  one.signature.devices = 1;
  one.compiled = all.compiled;
  one.prompts = {all.prompts.at(device)};
  one.negative_prompts = {all.negative_prompts.at(device)};
  one.device_keys = {c.key};
  one.warnings = all.warnings;
  one.embeddings = all.embeddings;
  one.model_calls = all.model_calls;
  one.timings = all.timings;
  if (device < static_cast<int>(all.context_tokens.size())) one.context_tokens = {all.context_tokens[device]};
  out->images = {run.images.at(device)};
  return out;
}

}  // namespace octodiff::gui
