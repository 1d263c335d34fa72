// Problems show as clear messages in the window's error banner (and the errorShown signal) —
// never a crash, a hang or a modal box: bad model paths and files, impossible sizes, an
// unavailable dtype, no prompt, a second job while one runs.
#include "gui_test_support.h"

using namespace octodiff::gui;
using namespace octodiff::gui::test;

class ErrorsTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  QTemporaryDir scratch_;

  // Runs the form and expects a failure whose message contains `needle`.
  static void expectRunError(MainWindow& w, const QString& needle) {
    QSignalSpy errors(&w, &MainWindow::errorShown);
    if (w.generate()) QCOMPARE(waitForJob(w), std::optional<JobOutcome>(JobOutcome::Failed));
    QVERIFY(!errors.isEmpty());
    const QString message = w.errorBanner()->message();
    qInfo("message: %s", qPrintable(message));
    QVERIFY2(message.contains(needle, Qt::CaseInsensitive), qPrintable(message));
    QVERIFY(w.errorBanner()->isVisible());
    QVERIFY(w.errorBanner()->isError());
    QVERIFY(w.generateButton()->isEnabled());  // ready for the next try
  }

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void missingModelFolder() {
    auto w = openWindow(scratch_.filePath("no-such-model"));
    QVERIFY(!w->controller()->model());
    QVERIFY(w->errorBanner()->isVisible());
    QVERIFY2(w->errorBanner()->message().startsWith("Could not load the model"),
             qPrintable(w->errorBanner()->message()));
    QVERIFY(w->modelChooser()->statusLabel()->text().startsWith("Not loaded"));
    // Generating without a model is refused with a message, not a crash.
    fillForm(*w, {"a cat"});
    expectRunError(*w, "No model is loaded");
    // The right model can still be loaded afterwards.
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadModel(tinyModelPath(), {});
    QVERIFY(ready.wait(60000));
    QVERIFY(w->controller()->model());
  }

  void corruptSingleFileCheckpoint() {
    QFile bad(scratch_.filePath("broken.safetensors"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("\x10\x00\x00\x00\x00\x00\x00\x00{not json at all", 24);
    bad.close();
    auto w = openWindow(bad.fileName());
    QVERIFY(!w->controller()->model());
    qInfo("message: %s", qPrintable(w->errorBanner()->message()));
    QVERIFY(w->errorBanner()->message().contains("broken.safetensors"));
  }

  void impossibleSizesAndSettings() {
    auto w = openWindow();
    QVERIFY(w->controller()->model());
    fillForm(*w, {"a cat"});
    w->settingsPanel()->widthBox()->setValue(66);  // tiny-sd needs multiples of 4
    expectRunError(*w, "not a multiple of");
    w->settingsPanel()->widthBox()->setValue(0);
    w->settingsPanel()->heightBox()->setValue(8000);
    expectRunError(*w, "larger than the maximum");
    w->settingsPanel()->heightBox()->setValue(0);

    w->promptPanel()->setPrompts({"one", "two", "three"});
    w->settingsPanel()->batchBox()->setValue(2);
    expectRunError(*w, "cannot be split");
    w->settingsPanel()->batchBox()->setValue(1);

    w->promptPanel()->setPrompts({});
    expectRunError(*w, "Type a prompt");

    // After all that, a good run still works.
    fillForm(*w, {"a cat"});
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    QVERIFY(!w->errorBanner()->isVisible());  // a new run clears the old message
    QCOMPARE(w->resultGrid()->tileCount(), 1);
  }

  void secondJobWhileBusyIsRefused() {
    auto w = openWindow();
    fillForm(*w, {"busy"}, 0, 200);
    QVERIFY(w->generate());
    QVERIFY(!w->generate());  // the button is disabled; the slot refuses too
    QVERIFY(!w->controller()->start(Job{}));
    w->cancel();
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Cancelled));
  }
};

QTEST_MAIN(ErrorsTest)
#include "errors_test.moc"
