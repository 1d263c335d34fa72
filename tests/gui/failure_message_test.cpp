// The one wording of a worker's failure (failure_message.h) that runs, loads, comparison sheets
// and ControlNet loads share: the exception's message after the context's prefix, out of memory
// with the context's advice, and anything else naming the task.
#include <QTest>
#include <new>
#include <stdexcept>

#include "core/error.h"
#include "failure_message.h"

using namespace octodiff;
using namespace octodiff::gui;

namespace {

template <typename E>
std::exception_ptr thrown(E e) {
  try {
    throw e;
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

class FailureMessageTest : public QObject {
  Q_OBJECT
 private slots:
  void runWording() {
    QCOMPARE(describeFailure(thrown(Error("'x.safetensors': tensor 'a' has shape (2)"))),
             QString("'x.safetensors': tensor 'a' has shape (2)"));
    QCOMPARE(describeFailure(thrown(std::bad_alloc())),
             QString("Out of memory. Try fewer images (devices × batch), a smaller image size, or close other programs."));
    QCOMPARE(describeFailure(thrown(42)), QString("An unknown error stopped the run."));
  }

  void contextWording() {
    FailureContext sheet;
    sheet.prefix = "Comparison sheet: ";
    sheet.memoryAdvice = "Try a smaller sheet or image size.";
    sheet.task = "the comparison sheet";
    QCOMPARE(describeFailure(thrown(std::runtime_error("steps must be 1…1000")), sheet),
             QString("Comparison sheet: steps must be 1…1000"));
    QCOMPARE(describeFailure(thrown(std::bad_alloc()), sheet), QString("Out of memory. Try a smaller sheet or image size."));
    QCOMPARE(describeFailure(thrown(42), sheet), QString("An unknown error stopped the comparison sheet."));
  }
};

QTEST_MAIN(FailureMessageTest)
#include "failure_message_test.moc"
