// The app's soak: 50 runs through the real window and its GenerationController on the tiny model,
// settings changing from run to run (prompts, steps, scheduler, batch), a third of them
// cancelled at a random moment; every run ends Completed or Cancelled (never Failed, no error
// banner), the buttons come back, and a completed run repeats bit for bit whatever was cancelled
// in between. Then the window is closed in the middle of a run, and a new window works.
// RSS after every run is printed (a report, not asserted), and what the app keeps is counted and
// bounded: the pipeline's compiled plans (ShardedPipeline::kMaxCachedPlans), the activation memory
// they hold between runs (one plan's at most, within the kept-activations budget), and the image
// tiles alive (those of the run shown).
#include <malloc.h>

#include <QElapsedTimer>
#include <QFile>
#include <map>
#include <random>

#include "core/memory.h"
#include "gui_test_support.h"
#include "error_banner.h"
#include "image_tile.h"
#include "settings_panel.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

double rssMib() {
  QFile status(QStringLiteral("/proc/self/status"));
  if (!status.open(QIODevice::ReadOnly)) return 0;
  for (const QByteArray& line : status.readAll().split('\n'))
    if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ').at(0).toDouble() / 1024.0;
  return 0;
}

// What the app holds after a run, beside RSS.
struct Held {
  size_t plans = 0, arena_bytes = 0, plans_with_activations = 0;
  int tiles = 0;
};

Held heldBy(MainWindow& w) {
  QCoreApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);  // tiles let go of (deleteLater)
  Held h;
  if (const auto pipe = w.controller()->pipeline()) {
    h.plans = pipe->cached_plans();
    h.arena_bytes = pipe->arena_bytes_reserved();
    h.plans_with_activations = pipe->plans_holding_activations();
  }
  h.tiles = static_cast<int>(w.findChildren<ImageTile*>().size());
  return h;
}

}  // namespace

class SoakTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void fiftyRunsWithCancelsThenCloseMidRun() {
    auto w = openWindow();
    QVERIFY(w->controller()->model());
    const double rss_start = rssMib();
    const int tiles_at_start = heldBy(*w).tiles;  // before any run (other views' tiles, if any)
    std::mt19937 rng(25);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    std::map<QString, std::vector<QImage>> first_images;  // settings → the images of their first completed run
    int completed = 0, cancelled = 0, repeats = 0;
    QStringList rss_curve;  // MiB after each run
    for (int i = 0; i < 50; ++i) {
      // Few enough combinations that settings come back (and must give the same images again),
      // more signatures (3 × 2 × 2) than the pipeline keeps plans for (evictions happen).
      const int seed = pick(2), steps = 2 + pick(3), scheduler = pick(2) * (w->settingsPanel()->schedulerBox()->count() - 1);
      const QStringList prompts = pick(2) ? QStringList{"a red circle"} : QStringList{"a red circle", "a blue square"};
      fillForm(*w, prompts, seed, steps);
      w->settingsPanel()->schedulerBox()->setCurrentIndex(scheduler);
      const QString key = QStringLiteral("%1/%2/%3/%4").arg(seed).arg(steps).arg(scheduler).arg(prompts.size());
      QSignalSpy errors(w.get(), &MainWindow::errorShown);
      QVERIFY(w->generate());
      const bool cancel = pick(3) == 0;
      if (cancel) {
        QTest::qWait(pick(60));
        w->cancelButton()->click();
      }
      const auto outcome = waitForJob(*w, 120000);
      QVERIFY2(outcome.has_value(), qPrintable(QStringLiteral("run %1 did not end").arg(i)));
      QVERIFY2(*outcome != JobOutcome::Failed, qPrintable(w->errorBanner()->message()));
      QCOMPARE(errors.count(), 0);
      QVERIFY(w->generateButton()->isEnabled());
      QVERIFY(!w->cancelButton()->isEnabled());
      const Held held = heldBy(*w);
      rss_curve << QString::number(rssMib(), 'f', 1);
      QVERIFY2(held.plans <= ShardedPipeline::kMaxCachedPlans, qPrintable(QString::number(held.plans)));
      // Between runs only the last run's plan may keep activations (its weights stay resident),
      // within the budget (sharded_pipeline.h, "Activation memory").
      QVERIFY2(held.plans_with_activations <= 1, qPrintable(QString::number(held.plans_with_activations)));
      QVERIFY(static_cast<double>(held.arena_bytes) <=
              ShardedPipeline::kKeptActivationsFractionOfRam * physical_memory_bytes());
      QVERIFY2(held.tiles <= tiles_at_start + 2,  // the grid shows this run's one or two images
               qPrintable(QStringLiteral("%1 image tiles alive").arg(held.tiles)));
      if (*outcome == JobOutcome::Cancelled) {
        QVERIFY(cancel);
        ++cancelled;
        continue;
      }
      ++completed;
      const RunPtr run = w->lastRun();
      QVERIFY(run);
      auto [it, first] = first_images.try_emplace(key, run->images);
      if (!first) {
        ++repeats;
        QVERIFY2(it->second == run->images, qPrintable("a repeat differs: " + key));
      }
    }
    const double rss_runs = rssMib();
    const Held held = heldBy(*w);
    qInfo("[gui soak] 50 runs: %d completed (%d repeats of earlier settings, all identical), %d cancelled; "
          "RSS start %.1f MiB, end %.1f MiB; %zu plans cached (bound %zu), %zu arena bytes, %d tiles",
          completed, repeats, cancelled, rss_start, rss_runs, held.plans, ShardedPipeline::kMaxCachedPlans,
          held.arena_bytes, held.tiles);
    qInfo("[gui soak] RSS after each run (MiB): %s", qPrintable(rss_curve.join(' ')));
    malloc_trim(0);
    qInfo("[gui soak] RSS after malloc_trim(0): %.1f MiB (the rest is live or in the allocator's pools)", rssMib());
    QVERIFY(completed > 0 && cancelled > 0 && repeats > 0);

    // Closing the window in the middle of a run cancels it and waits for the worker.
    fillForm(*w, {"closing while running"}, 1, 400);
    QVERIFY(w->generate());
    QTest::qWait(200 + pick(300));
    QVERIFY(w->controller()->isGenerating());
    QVERIFY(w->close());
    QVERIFY(!w->controller()->isGenerating());
    w.reset();

    // A new window in the same process still works.
    auto again = openWindow();
    QVERIFY(again->controller()->model());
    fillForm(*again, {"a red circle"}, 0, 2);
    QVERIFY(again->generate());
    QCOMPARE(waitForJob(*again), std::optional<JobOutcome>(JobOutcome::Completed));
    qInfo("[gui soak] after closing mid-run and opening a new window: RSS %.1f MiB", rssMib());
  }
};

QTEST_MAIN(SoakTest)
#include "soak_test.moc"
