// Settings persist with QSettings ("Octodiff"/"Octodiff") — here in a temporary location, never
// the user's — and the progress bookkeeping (fractions, ETA) is right.
#include "gui_test_support.h"
#include "progress_tracker.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class SettingsTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void settingsLiveInTheTemporaryFolder() {
    QSettings s(QStringLiteral("Octodiff"), QStringLiteral("Octodiff"));
    QVERIFY2(s.fileName().startsWith(settings_dir_->path()), qPrintable(s.fileName()));
  }

  void formAndModelPersistAcrossWindows() {
    {
      auto w = openWindow();
      QVERIFY(w->controller()->model());
      w->promptPanel()->setPrompts({"first", "", "third"});
      w->promptPanel()->setNegativePrompt("grainy");
      auto* s = w->settingsPanel();
      s->seedBox()->setValue(777);
      s->lockBox()->setChecked(false);
      s->stepsBox()->setValue(13);
      s->guidanceBox()->setValue(3.25);
      s->schedulerBox()->setCurrentIndex(
          s->schedulerBox()->findText("DPM++ 2M Karras"));  // kept with its sigmas
      QVERIFY(s->schedulerBox()->currentIndex() > 0);
      s->noiseScheduleBox()->setCurrentIndex(s->noiseScheduleBox()->findText("Zero terminal SNR"));
      s->guidanceRescaleBox()->setValue(0.7);
      s->widthBox()->setValue(96);
      s->devicesBox()->setValue(4);
      s->batchBox()->setValue(2);
      s->compatBox()->setCurrentIndex(1);
      s->threadsBox()->setValue(2);
      w->progressPanel()->setPreviewEnabled(false);
      w->seedComparison()->setSeedsText("4-6");
      w->close();
    }
    auto w = openWindow({}, /*expectLoad=*/true);  // no path given: the remembered model
    QCOMPARE(w->modelChooser()->path(), tinyModelPath());
    QVERIFY(w->controller()->model());
    QCOMPARE(w->promptPanel()->prompts().mid(0, 3), (QStringList{"first", "", "third"}));
    QCOMPARE(w->promptPanel()->negativePrompt(), QString("grainy"));
    auto* s = w->settingsPanel();
    QCOMPARE(s->seed(), int64_t{777});
    QVERIFY(!s->seedLocked());
    QCOMPARE(s->stepsBox()->value(), 13);
    QCOMPARE(s->guidanceBox()->value(), 3.25);
    QCOMPARE(s->schedulerBox()->currentText(), QString("DPM++ 2M Karras"));
    GenerationRequest r;
    s->applyTo(&r);
    QCOMPARE(r.scheduler, std::optional(SchedulerKind::DpmSolverPP));
    QCOMPARE(r.karras_sigmas, std::optional(true));
    QCOMPARE(r.zero_snr, std::optional(true));
    QCOMPARE(r.guidance_rescale, 0.7);
    QCOMPARE(s->noiseScheduleBox()->currentText(), QString("Zero terminal SNR"));
    QCOMPARE(s->widthBox()->value(), 96);
    QCOMPARE(s->devicesBox()->value(), 4);
    QCOMPARE(s->batchBox()->value(), 2);
    QCOMPARE(s->compatBox()->currentIndex(), 1);
    QCOMPARE(s->threadsBox()->value(), 2);
    QVERIFY(s->advancedVisible());  // non-default advanced settings are shown
    QVERIFY(!w->progressPanel()->previewEnabled());
    QCOMPARE(AppSettings().recentModels().value(0), tinyModelPath());
  }

  void unlockedSeedIsNewForEveryRun() {
    auto w = openWindow();
    fillForm(*w, {"dice"}, 5, 1);
    w->settingsPanel()->lockBox()->setChecked(false);
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    const int64_t first = w->lastRun()->seed();
    QCOMPARE(w->settingsPanel()->seed(), first);  // the box shows the seed used
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    QVERIFY(w->lastRun()->seed() != first);  // 1 in 2^31 to collide
  }

  void progressFractionsAndEta() {
    ProgressTracker t;
    t.startJob(2, 0.0);
    t.startRun(0, 2, 4);
    QCOMPARE(t.overallFraction(), 0.0);
    QVERIFY(!t.etaSeconds(1.0));
    t.onEvent({Phase::TextEncode, 0, 0, 0, 0});
    t.onEvent({Phase::Denoise, 0, 2, 4, 0.1});
    QCOMPARE(t.deviceFraction(0), 0.5);
    QCOMPARE(t.deviceFraction(1), 0.0);
    t.onEvent({Phase::Denoise, 1, 4, 4, 0.1});
    QCOMPARE(t.deviceFraction(1), 1.0);
    const double f = t.overallFraction();
    QVERIFY(f > 0.3 && f < 0.5);  // run 1 of 2, three quarters of its steps
    const auto eta = t.etaSeconds(10.0);
    QVERIFY(eta.has_value());
    QCOMPARE(*eta, 10.0 * (1 - f) / f);
    t.finishRun();
    QCOMPARE(t.overallFraction(), 0.5);
    t.startRun(1, 2, 4);
    QCOMPARE(t.overallFraction(), 0.5);
    QVERIFY(t.phaseText().startsWith("run 2/2"));
    t.finishRun();
    QCOMPARE(t.overallFraction(), 1.0);
    QCOMPARE(formatDuration(0.25), QString("250 ms"));
    QCOMPARE(formatDuration(3.456), QString("3.46 s"));
    QCOMPARE(formatDuration(125), QString("2 min 05 s"));
  }
};

QTEST_MAIN(SettingsTest)
#include "settings_test.moc"
