// Seed comparison: the same prompts with several seeds as labelled grids side by side (runs after
// the first reuse the compiled plan), and a seed sweep of one prompt.
#include "gui_test_support.h"

using namespace octodiff::gui;
using namespace octodiff::gui::test;

class SeedComparisonTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
  }
  void cleanupTestCase() { w_.reset(); }

  void parsesSeedLists() {
    QString error;
    QCOMPARE(*SeedComparisonView::parseSeeds("0, 1, 42", &error), (std::vector<int64_t>{0, 1, 42}));
    QCOMPARE(*SeedComparisonView::parseSeeds("10-13 7", &error), (std::vector<int64_t>{10, 11, 12, 13, 7}));
    QCOMPARE(*SeedComparisonView::parseSeeds("5 - 6", &error), (std::vector<int64_t>{5, 6}));
    QVERIFY(!SeedComparisonView::parseSeeds("3", &error));
    QVERIFY(error.contains("at least two"));
    QVERIFY(!SeedComparisonView::parseSeeds("1, x", &error));
    QVERIFY(error.contains("'x'"));
    QVERIFY(!SeedComparisonView::parseSeeds("9-2", &error));
    QVERIFY(!SeedComparisonView::parseSeeds("0-100", &error));
  }

  void gridsSideBySideWithTheSeedsLabelled() {
    fillForm(*w_, {"a red fox", "a blue bird", "a green frog"}, 0, 2);
    SeedComparisonView* view = w_->seedComparison();
    view->setMode(JobKind::SeedComparison);
    view->setSeedsText("3, 5, 8");
    QSignalSpy runs(w_->controller(), &GenerationController::runFinished);
    view->runButton()->click();
    QVERIFY(w_->controller()->isGenerating());
    QCOMPARE(w_->tabs()->currentWidget(), view);
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(runs.count(), 3);

    QCOMPARE(view->columnCount(), 3);
    const int64_t seeds[] = {3, 5, 8};
    for (int k = 0; k < 3; ++k) {
      ResultGridView* grid = view->column(k);
      QCOMPARE(grid->title(), QString("Seed %1").arg(seeds[k]));
      QCOMPARE(grid->tileCount(), 3);
      QCOMPARE(grid->rows(), 1);
      QCOMPARE(grid->columns(), 3);
      QVERIFY(grid->run());
      QCOMPARE(grid->run()->seed(), seeds[k]);
      QCOMPARE(grid->tile(1)->promptText(), QString("a blue bird"));
      QCOMPARE(grid->tile(1)->detailText(), QString("seed %1 · device 2/3").arg(seeds[k]));
    }
    // Side by side: left to right in seed order.
    QVERIFY(view->column(0)->mapTo(view, QPoint()).x() < view->column(1)->mapTo(view, QPoint()).x());
    QVERIFY(view->column(1)->mapTo(view, QPoint()).x() < view->column(2)->mapTo(view, QPoint()).x());
    // Different seeds, different noise, same prompts.
    QVERIFY(view->column(0)->tile(0)->image() != view->column(1)->tile(0)->image());

    // One signature for all three: compiled once, then cached.
    RunHistoryModel* h = w_->timingsPanel()->history();
    const int n = h->rowCount();
    QVERIFY(n >= 3);
    QVERIFY(h->row(n - 3).compiled);
    QVERIFY(!h->row(n - 2).compiled);
    QVERIFY(!h->row(n - 1).compiled);
    QCOMPARE(h->row(n - 1).kind, JobKind::SeedComparison);
    QCOMPARE(h->row(n - 1).seed, int64_t{8});
  }

  // Each tile is as large as its image (the tiny model's 64 × 64, twice) with its caption: no tall,
  // mostly empty tiles.
  void tilesAreSizedToTheirImages() {
    SeedComparisonView* view = w_->seedComparison();
    QCOMPARE(view->columnCount(), 3);
    QTest::qWait(50);  // the layout follows the tiles' sizes
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 3; ++i) {
        ImageTile* tile = view->column(k)->tile(i);
        auto* canvas = tile->findChild<ImageCanvas*>();
        QVERIFY(canvas);
        QCOMPARE(canvas->size(), QSize(128, 128));
        QCOMPARE(canvas->imageRect().size(), QSize(126, 126));  // the image fills it (a 1-pixel frame)
        const int caption = tile->height() - canvas->height();
        if (k == 0 && i == 0) qInfo("tile %d x %d, picture 128 x 128", tile->width(), tile->height());
        QVERIFY2(caption < 80, qPrintable(QString::number(tile->height())));
        QVERIFY(tile->width() < 128 + 24);
      }
    // Side by side without gaps wider than the spacing.
    const int right0 = view->column(0)->mapTo(view, QPoint(view->column(0)->width(), 0)).x();
    QVERIFY(view->column(1)->mapTo(view, QPoint()).x() - right0 < 40);
    QCOMPARE(ResultGridView::shownSize(QSize(512, 512)), QSize(256, 256));
    QCOMPARE(ResultGridView::shownSize(QSize(768, 512)), QSize(256, 170));
    QCOMPARE(ResultGridView::shownSize(QSize(200, 100)), QSize(200, 100));
  }

  void seedSweepIsARowOfOnePromptImages() {
    fillForm(*w_, {"", "a lone tree", "ignored second prompt"}, 0, 2);
    SeedComparisonView* view = w_->seedComparison();
    view->setMode(JobKind::SeedSweep);
    view->setSeedsText("20-23");
    view->runButton()->click();
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(view->columnCount(), 4);
    for (int k = 0; k < 4; ++k) {
      QCOMPARE(view->column(k)->title(), QString("Seed %1").arg(20 + k));
      QCOMPARE(view->column(k)->tileCount(), 1);
      QCOMPARE(view->column(k)->tile(0)->promptText(), QString("a lone tree"));
      QCOMPARE(view->column(k)->run()->devices(), 1);
    }
    const int y0 = view->column(0)->mapTo(view, QPoint()).y();
    QCOMPARE(view->column(3)->mapTo(view, QPoint()).y(), y0);  // one row

    // Seed 21 of the sweep is exactly what a plain Generate with seed 21 makes.
    const QImage swept = view->column(1)->tile(0)->image();
    fillForm(*w_, {"a lone tree"}, 21, 2);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w_->resultGrid()->tile(0)->image(), swept);
    const QString path = resultsDir() + "/seed_sweep.png";
    w_->tabs()->setCurrentWidget(view);
    QVERIFY(w_->grab().save(path));
  }

  void badSeedListIsAnError() {
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    w_->seedComparison()->setSeedsText("7");
    w_->seedComparison()->runButton()->click();
    QCOMPARE(errors.count(), 1);
    QVERIFY(w_->errorBanner()->message().contains("at least two seeds"));
    QVERIFY(!w_->controller()->isGenerating());
  }
};

QTEST_MAIN(SeedComparisonTest)
#include "seed_comparison_test.moc"
