// What the user reads when work on a worker thread threw: one wording for every job of the app
// (runs, model and LoRA loads, comparison sheets, ControlNet loads).
#pragma once

#include <QString>
#include <exception>

namespace octodiff::gui {

struct FailureContext {
  QString prefix;  // put before the exception's message, e.g. "Comparison sheet: "
  QString memoryAdvice = QStringLiteral(
      "Try fewer images (devices × batch), a smaller image size, or close other programs.");
  QString task = QStringLiteral("the run");  // "An unknown error stopped <task>."
};

// The exception's message (after context.prefix); "Out of memory." with context.memoryAdvice for
// std::bad_alloc; a sentence naming context.task for anything that is not a std::exception.
QString describeFailure(std::exception_ptr e, const FailureContext& context = {});

}  // namespace octodiff::gui
