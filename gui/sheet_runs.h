// A comparison sheet's runs as the app keeps every run (RunRecord, kind Sheet), so that the run
// history lists them and a cell opens in the image dialog — with Save, Copy, Reuse and Vary —
// like any other image.
#pragma once

#include "pipeline/comparison_sheet.h"
#include "run_record.h"

namespace octodiff::gui {

// Run `run` of the sheet (plan.runs[run]: device d made cell plan.runs[run].cells[d]) with its
// images; number 0 (the controller numbers the runs it makes).
std::shared_ptr<RunRecord> sheetRunRecord(const SheetPlan& plan, int run, const SheetRunResult& result);

// The single run cell `cell` equals, made by device `device` of the sheet's run `run`: the cell's
// request, one device with the cell's key and prompt, the run's model, signature and image — so
// its metadata is describe_sheet_cell's.
RunPtr sheetCellRun(const SheetPlan& plan, int cell, const RunRecord& run, int device);

}  // namespace octodiff::gui
