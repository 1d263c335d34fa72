#include "failure_message.h"

#include <new>
#include <stdexcept>

namespace octodiff::gui {

QString describeFailure(std::exception_ptr e, const FailureContext& context) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return QStringLiteral("Out of memory. ") + context.memoryAdvice;
  } catch (const std::exception& ex) {
    return context.prefix + QString::fromStdString(ex.what());
  } catch (...) {
    return QStringLiteral("An unknown error stopped %1.").arg(context.task);
  }
}

}  // namespace octodiff::gui
