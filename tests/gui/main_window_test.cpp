// The main window end to end on the tiny random model: generate eight images, compile on the
// first run and a cached plan on the second, live progress and preview, cancel mid-run and
// generate again, the enlarge dialog, clipboard, reuse — and a screenshot for a person to look at.
#include <QApplication>
#include <QClipboard>
#include <QMimeData>
#include <QTableView>

#include "gui_test_support.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class MainWindowTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY2(w_->controller()->model() != nullptr, qPrintable(w_->errorBanner()->message()));
    QVERIFY(w_->windowTitle().contains("tiny random test model"));
    QVERIFY(w_->modelChooser()->statusLabel()->text().contains("tiny random test model"));
    // A fresh form uses the model's own scheduler, named in the box's first entry.
    QComboBox* scheduler = w_->settingsPanel()->schedulerBox();
    QCOMPARE(scheduler->currentIndex(), 0);
    QCOMPARE(scheduler->itemText(0), QString("Model's own (PNDM)"));
    QVERIFY(scheduler->findText("Euler a") > 0);
    QVERIFY(scheduler->findText("LCM") > 0);
    // A1111's Karras samplers are entries of their own, beside their plain schedulers.
    for (const char* name : {"LMS Karras", "DPM++ 2M Karras", "Euler Karras", "DPM++ 2M SDE Karras"}) {
      const int i = scheduler->findText(name);
      QVERIFY2(i > 0, name);
      GenerationRequest r;
      applySchedulerChoice(scheduler->itemData(i).toInt(), &r);
      QCOMPARE(r.karras_sigmas, std::optional(true));
      QCOMPARE(QString::fromStdString(sampler_display_name(*r.scheduler)) + " Karras", QString(name));
    }
    {  // DPM++ 2M SDE (A1111's name), plain
      const int i = scheduler->findText("DPM++ 2M SDE");
      QVERIFY(i > 0);
      GenerationRequest r;
      applySchedulerChoice(scheduler->itemData(i).toInt(), &r);
      QCOMPARE(r.scheduler, std::optional(SchedulerKind::DpmSolverSde));
      QCOMPARE(r.karras_sigmas, std::optional(false));
    }
    // A model whose configuration asks for Karras sigmas names them in the first entry.
    w_->settingsPanel()->setModelScheduler(SchedulerKind::DpmSolverPP, true);
    QCOMPARE(scheduler->itemText(0), QString("Model's own (DPM++ 2M Karras)"));
    w_->settingsPanel()->setModelScheduler(SchedulerKind::Pndm);
    // The noise schedule: the model's own (tiny-sd has no zero SNR), named; then the two choices.
    QComboBox* noise = w_->settingsPanel()->noiseScheduleBox();
    QCOMPARE(noise->currentIndex(), 0);
    QCOMPARE(noise->itemText(0), QString("Model's own (default)"));
    QCOMPARE(w_->settingsPanel()->guidanceRescaleBox()->text(), QString("off"));
    GenerationRequest fresh;  // (also the form to restore below)
    fresh.zero_snr = true;
    fresh.guidance_rescale = 0.5;
    w_->settingsPanel()->applyTo(&fresh);
    QCOMPARE(fresh.zero_snr, std::optional<bool>());
    QCOMPARE(fresh.guidance_rescale, 0.0);
    w_->settingsPanel()->setModelNoiseSchedule(true);
    QCOMPARE(noise->itemText(0), QString("Model's own (zero terminal SNR)"));
    w_->settingsPanel()->setModelNoiseSchedule(false);
    // A reopened image's settings show its schedule and φ; the form gives them back.
    GenerationRequest reopened = fresh;
    reopened.zero_snr = false;
    reopened.guidance_rescale = 0.3;
    w_->settingsPanel()->setFrom(reopened);
    QCOMPARE(noise->currentText(), QString("Default"));
    GenerationRequest back;
    w_->settingsPanel()->applyTo(&back);
    QCOMPARE(back.zero_snr, std::optional(false));
    QCOMPARE(back.guidance_rescale, 0.3);
    w_->settingsPanel()->setFrom(fresh);
  }

  void cleanupTestCase() { w_.reset(); }

  void generatesEightTilesThenReusesThePlan() {
    fillForm(*w_, eightPrompts(), /*seed=*/11, /*steps=*/2);
    QSignalSpy previews(w_->controller(), &GenerationController::previewReady);
    QSignalSpy progress(w_->controller(), &GenerationController::progressChanged);
    QVERIFY(w_->generate());
    QVERIFY(w_->controller()->isGenerating());
    QVERIFY(!w_->generateButton()->isEnabled());
    QVERIFY(w_->cancelButton()->isEnabled());
    // The UI thread stays free while the engine works: events keep being processed.
    QElapsedTimer responsive;
    responsive.start();
    QTest::qWait(50);
    QVERIFY(responsive.elapsed() < 2000);
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));

    ResultGridView* grid = w_->resultGrid();
    QCOMPARE(grid->tileCount(), 8);
    QCOMPARE(grid->rows(), 2);
    QCOMPARE(grid->columns(), 4);
    for (int i = 0; i < 8; ++i) {
      QVERIFY(grid->tile(i)->isFinal());
      QCOMPARE(grid->tile(i)->image().size(), QSize(64, 64));
      QCOMPARE(grid->tile(i)->promptText(), eightPrompts()[i]);
      QCOMPARE(grid->tile(i)->detailText(), QString("seed 11 · device %1/8").arg(i + 1));
    }
    // Different devices draw different noise: the images differ.
    QVERIFY(grid->tile(0)->image() != grid->tile(1)->image());
    QVERIFY(progress.count() >= 8 * 2);  // at least one event per device and step
    QVERIFY2(previews.count() >= 8, qPrintable(QString::number(previews.count())));
    QCOMPARE(w_->progressPanel()->overallBar()->value(), w_->progressPanel()->overallBar()->maximum());
    QCOMPARE(w_->progressPanel()->deviceBarCount(), 8);

    TimingsPanel* t = w_->timingsPanel();
    QCOMPARE(t->history()->rowCount(), 1);
    QVERIFY(t->history()->row(0).compiled);
    QVERIFY2(t->planText().contains("compiled"), qPrintable(t->planText()));
    QVERIFY(t->breakdownText().contains("Text encoding"));
    QVERIFY(t->breakdownText().contains("Denoising"));
    QVERIFY(t->breakdownText().contains("Decoding"));
    QCOMPARE(t->history()->index(0, RunHistoryModel::Plan).data().toString(), QString("compiled"));

    // Same signature, another seed: the plan comes from the cache.
    w_->settingsPanel()->seedBox()->setValue(12);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(t->history()->rowCount(), 2);
    QVERIFY(!t->history()->row(1).compiled);
    QCOMPARE(t->history()->row(1).timings.compile, 0.0);
    QVERIFY(t->history()->row(1).timings.denoise > 0);
    QCOMPARE(t->history()->row(1).timings.step.size(), size_t{2});
    QCOMPARE(t->history()->index(1, RunHistoryModel::Plan).data().toString(), QString("cached"));
    QVERIFY2(t->planText().contains("cached"), qPrintable(t->planText()));
    QCOMPARE(grid->tile(3)->detailText(), QString("seed 12 · device 4/8"));
    QCOMPARE(w_->lastRun()->number, 2);
  }

  void screenshotAfterARun() {
    QVERIFY(w_->lastRun());
    // The default size holds the whole layout (nothing forces the window wider or taller).
    QVERIFY(w_->minimumSizeHint().width() <= 1400);
    QVERIFY(w_->minimumSizeHint().height() <= 900);
    w_->resize(1400, 900);
    w_->resultGrid()->tile(0)->setActionsVisible(true);  // show the hover actions on one tile
    QTest::qWait(100);
    const QString path = resultsDir() + "/main_window.png";
    QVERIFY(w_->grab().save(path));
    QVERIFY(QFileInfo(path).size() > 10000);
    QCOMPARE(QImage(path).size(), QSize(1400, 900));
    w_->resultGrid()->tile(0)->setActionsVisible(false);
    qInfo("screenshot: %s", qPrintable(path));
  }

  void cancelMidRunThenGenerateAgain() {
    fillForm(*w_, {"a slow one", "another slow one"}, 5, /*steps=*/400);
    QSignalSpy progress(w_->controller(), &GenerationController::progressChanged);
    QVERIFY(w_->generate());
    // Wait until denoising is under way, then cancel.
    QElapsedTimer t;
    t.start();
    while (w_->controller()->progress().deviceFraction(0) == 0 && t.elapsed() < 120000) QTest::qWait(20);
    QVERIFY(w_->controller()->progress().deviceFraction(0) > 0);
    // The tiles show the live preview of the latents while denoising.
    while (!w_->resultGrid()->tile(0)->isPreview() && t.elapsed() < 120000) QTest::qWait(20);
    QVERIFY(w_->resultGrid()->tile(0)->isPreview());
    QVERIFY(!w_->resultGrid()->tile(0)->image().isNull());
    QTest::qWait(300);
    QVERIFY(w_->progressPanel()->etaText().contains("left"));  // an ETA once there is a rate
    QVERIFY(w_->grab().save(resultsDir() + "/main_window_running.png"));
    QElapsedTimer cancel_clock;
    cancel_clock.start();
    w_->cancelButton()->click();
    QCOMPARE(waitForJob(*w_, 60000), std::optional<JobOutcome>(JobOutcome::Cancelled));
    qInfo("cancel took effect after %lld ms", static_cast<long long>(cancel_clock.elapsed()));
    QVERIFY(w_->controller()->progress().deviceFraction(0) < 0.5);  // far from done: it really stopped
    QVERIFY(w_->errorBanner()->message().isEmpty());                // cancelling is not an error
    QCOMPARE(w_->timingsPanel()->history()->rowCount(), 2);         // no run recorded
    QVERIFY(w_->generateButton()->isEnabled());
    QVERIFY(!w_->cancelButton()->isEnabled());
    QVERIFY(w_->progressPanel()->phaseText().contains("Cancelled"));

    fillForm(*w_, {"after the cancel", "still fine"}, 5, 2);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w_->resultGrid()->tileCount(), 2);
    QVERIFY(w_->resultGrid()->tile(1)->isFinal());
    QCOMPARE(w_->timingsPanel()->history()->rowCount(), 3);
    QVERIFY(w_->timingsPanel()->history()->row(2).compiled);  // D=2: a new signature
  }

  void enlargeCopyAndReuse() {
    RunPtr run = w_->lastRun();
    QVERIFY(run);
    ImageDialog* dialog = w_->enlarge(run, 1);
    QVERIFY(dialog);
    QVERIFY(dialog->zoom() >= 8);  // 64 px blown up to fit ~768 px, by a whole factor
    QCOMPARE(dialog->shownSize(), QSize(64, 64) * dialog->zoom());
    dialog->setZoom(4);
    QCOMPARE(dialog->shownSize(), QSize(256, 256));
    dialog->close();

    w_->copyImage(run, 1);
    const QMimeData* mime = QApplication::clipboard()->mimeData();
    QVERIFY(mime);
    QCOMPARE(qvariant_cast<QImage>(mime->imageData()).convertToFormat(QImage::Format_RGB888),
             run->images[1].convertToFormat(QImage::Format_RGB888));
    QVERIFY(mime->data("image/png").startsWith("\x89PNG"));

    fillForm(*w_, {"something else"}, 999, 7);
    w_->reuseSettings(run, 1);
    QCOMPARE(w_->promptPanel()->prompts().at(0), QString("still fine"));
    QCOMPARE(w_->settingsPanel()->seed(), int64_t{5});
    QCOMPARE(w_->settingsPanel()->stepsBox()->value(), 2);
    // The image's device key depends on the device count: it is restored, so image 2 comes back.
    QCOMPARE(w_->settingsPanel()->devicesBox()->value(), 2);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w_->resultGrid()->tile(1)->image(), run->images[1]);
  }

  void clickingATileEnlargesIt() {
    ImageTile* tile = w_->resultGrid()->tile(0);
    QVERIFY(tile->isFinal());
    QTest::mouseClick(tile, Qt::LeftButton, {}, tile->rect().center());
    auto* dialog = w_->findChild<ImageDialog*>();
    QVERIFY(dialog);
    QVERIFY(dialog->isVisible());
    QVERIFY(!dialog->smooth());  // 64 px images: nearest-neighbour by default
    QVERIFY(dialog->grab().save(resultsDir() + "/image_dialog.png"));
    dialog->setSmooth(true);
    QCOMPARE(dialog->shownSize(), QSize(64, 64) * dialog->zoom());
    dialog->close();
    QTest::qWait(10);
  }

  void previewCanBeSwitchedOff() {
    fillForm(*w_, {"no preview"}, 3, 2);
    w_->progressPanel()->setPreviewEnabled(false);
    QSignalSpy previews(w_->controller(), &GenerationController::previewReady);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(previews.count(), 0);  // the engine was not even asked for previews
    w_->progressPanel()->setPreviewEnabled(true);
  }

  void closingDuringARunCancelsCleanly() {
    fillForm(*w_, {"closing while running"}, 1, 400);
    QVERIFY(w_->generate());
    QTest::qWait(300);
    QVERIFY(w_->controller()->isGenerating());
    QElapsedTimer t;
    t.start();
    QVERIFY(w_->close());
    QVERIFY(!w_->controller()->isGenerating());
    qInfo("closed during a run in %lld ms", static_cast<long long>(t.elapsed()));
    w_.reset();  // destroys the pipeline after the worker finished
  }
};

QTEST_MAIN(MainWindowTest)
#include "main_window_test.moc"
