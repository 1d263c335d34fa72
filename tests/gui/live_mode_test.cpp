// Live mode on the tiny random model: typing starts one run after a pause (not one per key), a
// change during a run cancels it and runs the newest prompt, the seed is kept, and nothing runs
// while live mode is off.
#include "gui_test_support.h"

using namespace octodiff::gui;
using namespace octodiff::gui::test;

class LiveModeTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

  int jobs_started_ = 0, jobs_finished_ = 0;

  // Waits until live mode has nothing pending and every job started has reported its end on the
  // UI thread (the controller's worker may be done before its signals have arrived).
  bool waitUntilSettled(int timeoutMs = 300000) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < timeoutMs) {
      QTest::qWait(50);
      if (!w_->liveMode()->isPending() && !w_->controller()->isBusy() && jobs_started_ == jobs_finished_) return true;
    }
    return false;
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model() != nullptr);
    w_->liveMode()->setDelayMs(150);
    connect(w_->controller(), &GenerationController::jobStarted, this, [this] { ++jobs_started_; });
    connect(w_->controller(), &GenerationController::jobFinished, this, [this] { ++jobs_finished_; });
  }

  void cleanupTestCase() { w_.reset(); }

  void typingRunsOnceAfterAPauseAndKeepsTheSeed() {
    fillForm(*w_, {"a red"}, /*seed=*/5, /*steps=*/2);
    w_->settingsPanel()->lockBox()->setChecked(false);  // live runs keep the seed even unlocked
    QVERIFY(waitUntilSettled());
    QSignalSpy started(w_->controller(), &GenerationController::jobStarted);
    w_->liveBox()->setChecked(true);
    QVERIFY(waitUntilSettled());
    QCOMPARE(started.count(), 1);  // turning live mode on shows the current inputs
    started.clear();
    QLineEdit* field = w_->promptPanel()->promptField(0);
    for (const char* text : {"a red c", "a red ci", "a red cir", "a red circle"}) {
      field->setText(text);
      QTest::qWait(20);  // faster than the debounce delay
    }
    QVERIFY(waitUntilSettled());
    QCOMPARE(started.count(), 1);
    ResultGridView* grid = w_->resultGrid();
    QCOMPARE(grid->tileCount(), 1);
    QVERIFY(grid->tile(0)->isFinal());
    QCOMPARE(grid->tile(0)->promptText(), QString("a red circle"));
    QCOMPARE(w_->settingsPanel()->seed(), int64_t{5});
    w_->liveBox()->setChecked(false);
  }

  void aChangeDuringARunCancelsItAndRunsTheNewestPrompt() {
    fillForm(*w_, {"a blue square"}, /*seed=*/7, /*steps=*/400);  // long enough to be caught mid-run
    QVERIFY(waitUntilSettled());
    QSignalSpy finished(w_->controller(), &GenerationController::jobFinished);
    w_->liveBox()->setChecked(true);
    QElapsedTimer t;
    t.start();
    while (!w_->controller()->isGenerating() && t.elapsed() < 60000) QTest::qWait(10);
    QVERIFY(w_->controller()->isGenerating());
    w_->settingsPanel()->stepsBox()->setValue(2);  // settings are read when the run starts
    w_->promptPanel()->promptField(0)->setText("a green star");
    QVERIFY(waitUntilSettled());
    QCOMPARE(finished.count(), 2);
    QCOMPARE(finished.at(0).at(0).value<JobOutcome>(), JobOutcome::Cancelled);
    QCOMPARE(finished.at(1).at(0).value<JobOutcome>(), JobOutcome::Completed);
    QCOMPARE(w_->resultGrid()->tile(0)->promptText(), QString("a green star"));
    w_->liveBox()->setChecked(false);
  }

  // A short pause encodes the new prompt ahead (before the run's longer pause is over) and the run
  // then takes its encoding from the pipeline's cache: it encodes nothing itself.
  void aPauseEncodesThePromptAheadAndTheRunTakesIt() {
    fillForm(*w_, {"a red circle"}, /*seed=*/3, /*steps=*/2);
    QVERIFY(waitUntilSettled());
    w_->liveMode()->setDelayMs(3000);
    QCOMPARE(w_->liveMode()->aheadDelayMs(), LiveMode::kAheadDelayMs);
    w_->liveBox()->setChecked(true);
    QVERIFY(waitUntilSettled());
    const auto pipe = w_->controller()->pipeline();
    const size_t misses = pipe->text_encodings().misses(), hits = pipe->text_encodings().hits();
    QSignalSpy ahead(w_->controller(), &GenerationController::promptsEncodedAhead);
    QSignalSpy started(w_->controller(), &GenerationController::jobStarted);
    w_->promptPanel()->promptField(0)->setText("a green triangle");
    QVERIFY(ahead.wait(2500));  // well before the 3 s pause ends
    QCOMPARE(started.count(), 0);
    QVERIFY(ahead.at(0).at(0).toDouble() >= 0);  // no failure
    const size_t encoded = pipe->text_encodings().misses() - misses;
    QVERIFY(encoded >= 1);
    QVERIFY(waitUntilSettled());
    QCOMPARE(started.count(), 1);
    QCOMPARE(pipe->text_encodings().misses() - misses, encoded);  // the run encoded no row itself
    QVERIFY(pipe->text_encodings().hits() > hits);
    QCOMPARE(w_->resultGrid()->tile(0)->promptText(), QString("a green triangle"));
    std::printf("[live ahead] %zu row(s) encoded ahead in %.4f s; the run took them from the cache\n",
                encoded, ahead.at(0).at(0).toDouble());
    w_->liveBox()->setChecked(false);
    w_->liveMode()->setDelayMs(150);
  }

  void nothingRunsWhileLiveModeIsOff() {
    QVERIFY(waitUntilSettled());
    QSignalSpy started(w_->controller(), &GenerationController::jobStarted);
    QSignalSpy ahead(w_->controller(), &GenerationController::promptsEncodedAhead);
    w_->promptPanel()->promptField(0)->setText("a yellow ring");
    QTest::qWait(3 * w_->liveMode()->delayMs());
    QCOMPARE(started.count(), 0);
    QCOMPARE(ahead.count(), 0);
    QVERIFY(!w_->liveMode()->isPending());
  }
};

QTEST_MAIN(LiveModeTest)
#include "live_mode_test.moc"
