// The app in live mode on the embedded demo model with few-step settings: the model's own when it
// is a few-step model, else the few-step preset; its TAESD when it ships one. Typing regenerates
// the grid; the window is saved as test-results/screenshot-live.png (docs/screenshot-live.png is a
// copy) for a person to look at.
#include <QFileInfo>

#include "default_model.h"
#include "gui_test_support.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class LiveScreenshotTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void liveModeOnTheDemoModel() {
    auto w = openWindow(demoModelPath());
    QVERIFY2(w->controller()->model(), qPrintable(w->errorBanner()->message()));
    QVERIFY(w->windowTitle().contains("embedded demo model"));
    const QString taesd = demoModelPath() + "/taesd";
    if (QFileInfo::exists(taesd)) {
      QSignalSpy ready(w.get(), &MainWindow::modelReady);
      w->decoderPanel()->setTaesdPath(taesd);
      emit w->decoderPanel()->taesdPathChosen(taesd);
      QVERIFY(ready.wait(60000));
    }
    if (w->fewStepPanel()->note().isEmpty()) w->fewStepPanel()->presetButton()->click();
    QVERIFY(!w->fewStepPanel()->note().isEmpty());
    const int steps = w->settingsPanel()->stepsBox()->value();
    QVERIFY(steps <= 8);

    const QStringList prompts = {"a red star on a blue background",         "a yellow ring on a black background",
                                 "a big green triangle on a white background", "a small purple circle on a grey background",
                                 "an orange square on a green background",    "a blue star on a yellow background",
                                 "a large red ring on a white background",     "a green circle and a red square on a black background"};
    w->promptPanel()->setPrompts(prompts);
    w->settingsPanel()->seedBox()->setValue(0);
    w->settingsPanel()->lockBox()->setChecked(true);
    w->liveMode()->setDelayMs(200);
    QSignalSpy finished(w->controller(), &GenerationController::jobFinished);
    w->liveBox()->setChecked(true);
    for (int i = 0; i < 1200 && finished.isEmpty(); ++i) finished.wait(100);
    QVERIFY(!finished.isEmpty());
    // Typing: the last field changes, a live run follows with the new prompt.
    finished.clear();
    w->promptPanel()->promptField(7)->setText("a large yellow star on a purple background");
    for (int i = 0; i < 1200 && (finished.isEmpty() || w->liveMode()->isPending() || w->controller()->isBusy()); ++i)
      QTest::qWait(100);
    QVERIFY(!finished.isEmpty());
    QCOMPARE(finished.last().at(0).value<JobOutcome>(), JobOutcome::Completed);
    QCOMPARE(w->resultGrid()->tileCount(), 8);
    QCOMPARE(w->resultGrid()->tile(7)->promptText(), QString("a large yellow star on a purple background"));
    QCOMPARE(w->lastRun()->result.signature.steps, steps);

    w->resize(1400, 900);
    QTest::qWait(200);
    const QString path = resultsDir() + "/screenshot-live.png";
    QVERIFY(w->grab().save(path));
    QCOMPARE(QImage(path).size(), QSize(1400, 900));
    qInfo("screenshot: %s (%d steps, note: %s)", qPrintable(path), steps, qPrintable(w->fewStepPanel()->note()));
    w->liveBox()->setChecked(false);
  }
};

QTEST_MAIN(LiveScreenshotTest)
#include "live_screenshot_test.moc"
