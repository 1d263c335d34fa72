// The app on its embedded demo model, as a new user first sees it: eight prompts with the default
// settings (a few-step model: its own LCM scheduler, 4 steps, guidance 8), a 2×4 grid of matching
// pictures, and the screenshot the README shows (written to test-results/demo_main_window.png).
#include <QTest>

#include "gui_test_support.h"
#include "pipeline/model.h"

using namespace octodiff::gui;
using namespace octodiff::gui::test;

class DemoModelTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_;

 private slots:
  void initTestCase() { settings_ = useTemporarySettings(); }

  void eightPromptsOnTheDefaultModel() {
    auto w = openWindow(QString::fromStdString(octodiff::StableDiffusionModel::default_model_path().string()));
    QVERIFY(w->controller()->model() != nullptr);
    const QStringList prompts = {"a large red circle on a white background, centre",
                                 "a small blue star on a yellow background, top left",
                                 "a large green triangle on a black background, bottom right",
                                 "a purple ring on a grey background",
                                 "a large orange square on a blue background, right",
                                 "a small yellow circle on a purple background, bottom",
                                 "a large white star on a green background, centre",
                                 "a small black square on an orange background, top right"};
    // What the app set for the model when it loaded: at most 8 steps (issue 20.7).
    const int steps = w->settingsPanel()->stepsBox()->value();
    QVERIFY2(steps <= 8, qPrintable(QString::number(steps)));
    QVERIFY(w->fewStepPanel()->note().contains("LCM-distilled"));
    fillForm(*w, prompts, /*seed=*/42, steps);
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    auto* grid = w->resultGrid();
    QCOMPARE(grid->tileCount(), 8);
    QCOMPARE(grid->tile(0)->image().size(), QSize(64, 64));
    // Generate again: the second run reuses the compiled plan, so both timings are shown.
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w->timingsPanel()->history()->rowCount(), 2);
    QTest::qWait(200);
    const QString path = resultsDir() + "/demo_main_window.png";
    QVERIFY(w->grab().save(path));
    qInfo("screenshot: %s", qPrintable(path));
  }
};

QTEST_MAIN(DemoModelTest)
#include "demo_model_test.moc"
