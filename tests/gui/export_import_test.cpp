// Export and import: the grid and single images as PNG with octodiff-cli's metadata; opening
// or dropping such a PNG restores the settings that made it.
#include <sys/resource.h>

#include <QDropEvent>
#include <QMimeData>
#include <QUrl>
#include <csignal>

#include "gui_test_support.h"
#include "image_metadata_io.h"
#include "io/png.h"
#include "pipeline/export.h"
#include "pipeline/metadata.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class ExportImportTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  QTemporaryDir out_;
  std::unique_ptr<MainWindow> w_;

  // Makes a run with settings that differ from every default.
  void generateDistinctiveRun() {
    fillForm(*w_, eightPrompts(), /*seed=*/4242, /*steps=*/2);
    w_->promptPanel()->setNegativePrompt("blurry, low quality");
    w_->settingsPanel()->guidanceBox()->setValue(5.5);
    w_->settingsPanel()->schedulerBox()->setCurrentIndex(2);  // DDIM
    w_->settingsPanel()->rngBox()->setCurrentIndex(1);        // partitionable
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
  }

  void scrambleForm() {
    fillForm(*w_, {"something unrelated"}, 1, 33);
    w_->promptPanel()->setNegativePrompt(QString());
    w_->settingsPanel()->guidanceBox()->setValue(9);
    w_->settingsPanel()->schedulerBox()->setCurrentIndex(4);
    w_->settingsPanel()->rngBox()->setCurrentIndex(0);
  }

  void expectRestoredSettings() {
    SettingsPanel* s = w_->settingsPanel();
    QCOMPARE(s->seed(), int64_t{4242});
    QCOMPARE(s->stepsBox()->value(), 2);
    QCOMPARE(s->guidanceBox()->value(), 5.5);
    QCOMPARE(s->schedulerBox()->currentIndex(), 2);
    QCOMPARE(s->rngBox()->currentIndex(), 1);
    QCOMPARE(s->compatBox()->currentIndex(), 0);
    QCOMPARE(s->widthBox()->value(), 64);
    QCOMPARE(s->heightBox()->value(), 64);
    QCOMPARE(w_->promptPanel()->negativePrompt(), QString("blurry, low quality"));
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    QVERIFY(out_.isValid());
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
    generateDistinctiveRun();
    QVERIFY(w_->lastRun());
  }

  void cleanupTestCase() { w_.reset(); }

  void gridPngCarriesTheCliMetadata() {
    const QString path = out_.filePath("grid.png");
    QVERIFY(w_->exportGrid(path));
    std::vector<PngText> texts;
    const Image8 grid = read_png(path.toStdString(), &texts);
    QCOMPARE(grid.width, 4 * 64);
    QCOMPARE(grid.height, 2 * 64);
    // octodiff-cli writes save_grid_png(request, result, model): the same bytes of metadata.
    const RunPtr run = w_->lastRun();
    const auto expected = png_texts(describe_image(run->request, run->result, *run->model, -1, -1));
    QCOMPARE(texts.size(), expected.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      QCOMPARE(QString::fromStdString(texts[i].key), QString::fromStdString(expected[i].key));
      QCOMPARE(QString::fromStdString(texts[i].text), QString::fromStdString(expected[i].text));
    }
    // And the pixels are the engine's grid of this run.
    const Image8 engine_grid = result_grid(run->result);
    QVERIFY(grid.rgb == engine_grid.rgb);
    QVERIFY(QString::fromStdString(texts[0].text).contains("Sampler: DDIM"));
  }

  void importingTheGridRestoresEverySetting() {
    const QString path = out_.filePath("grid.png");
    QVERIFY(QFileInfo::exists(path));
    scrambleForm();
    QSignalSpy restored(w_.get(), &MainWindow::settingsRestored);
    QVERIFY(w_->importPng(path));
    QCOMPARE(restored.count(), 1);
    QCOMPARE(w_->promptPanel()->prompts(), eightPrompts());
    QCOMPARE(w_->settingsPanel()->devicesBox()->value(), 0);  // eight prompts set eight devices again
    expectRestoredSettings();

    // Generating again from the restored form reproduces the grid exactly.
    const RunPtr before = w_->lastRun();
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    for (int i = 0; i < 8; ++i) QCOMPARE(w_->lastRun()->images[i], before->images[i]);
  }

  void singleImageRoundTrip() {
    const RunPtr run = w_->lastRun();
    const QString path = out_.filePath("image6.png");
    QVERIFY(w_->exportImage(run, 5, path));
    std::vector<PngText> texts;
    const Image8 img = read_png(path.toStdString(), &texts);
    QCOMPARE(img.width, 64);
    QVERIFY(toQImage(img) == run->images[5].convertToFormat(QImage::Format_RGB888));
    auto meta = parse_png_metadata(texts);
    QVERIFY(meta);
    QCOMPARE(meta->device, 5);
    QVERIFY(meta->device_key.has_value());
    QCOMPARE(meta->device_key->k0, run->result.device_keys[5].k0);

    scrambleForm();
    QVERIFY(w_->importPng(path));
    QCOMPARE(w_->promptPanel()->prompts().at(0), eightPrompts()[5]);
    QVERIFY(w_->promptPanel()->prompts().at(1).isEmpty());
    QCOMPARE(w_->settingsPanel()->devicesBox()->value(), 8);  // its key is split(PRNGKey(seed), 8)[5]
    expectRestoredSettings();
  }

  void droppingAPngRestoresItsSettings() {
    scrambleForm();
    auto* mime = new QMimeData;
    mime->setUrls({QUrl::fromLocalFile(out_.filePath("grid.png"))});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(w_.get(), &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(w_.get(), &drop);
    QCOMPARE(w_->promptPanel()->prompts(), eightPrompts());
    expectRestoredSettings();
    delete mime;
  }

  void saveAllImagesLikeTheCli() {
    const QString dir = out_.filePath("all");
    QVERIFY(w_->exportAllImages(dir));
    for (int i = 1; i <= 8; ++i)
      QVERIFY2(QFileInfo::exists(QString("%1/octodiff-4242-%2.png").arg(dir).arg(i)), qPrintable(dir));
  }

  void pngWithoutSettingsIsAClearError() {
    const QString plain = out_.filePath("plain.png");
    write_png(plain.toStdString(), toImage8(w_->lastRun()->images[0]), {});
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    w_->promptPanel()->setPrompts({"kept"});
    QVERIFY(!w_->importPng(plain));
    QCOMPARE(errors.count(), 1);
    QVERIFY(w_->errorBanner()->isVisible());
    QVERIFY2(w_->errorBanner()->message().contains("no generation settings"),
             qPrintable(w_->errorBanner()->message()));
    QCOMPARE(w_->promptPanel()->prompts().at(0), QString("kept"));  // the form is untouched

    QFile junk(out_.filePath("junk.png"));
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("this is not a PNG at all");
    junk.close();
    QVERIFY(!w_->importPng(junk.fileName()));
    QCOMPARE(errors.count(), 2);
  }

  void exportToAnUnwritablePlaceIsAClearError() {
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    QVERIFY(!w_->exportGrid(out_.filePath("no/such/folder/grid.png")));
    QCOMPARE(errors.count(), 1);
    QVERIFY(w_->errorBanner()->message().startsWith("Could not save"));
    // A full disk, as the writer sees it: a file-size limit makes every write past 2 KiB fail
    // (EFBIG, with SIGXFSZ ignored), as ENOSPC would.
    struct rlimit old_limit {};
    QCOMPARE(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 2048;
    QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
    const bool saved = w_->exportGrid(out_.filePath("full-disk.png"));
    setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    QVERIFY(!saved);
    QCOMPARE(errors.count(), 2);
    qInfo("disk-full message: %s", qPrintable(w_->errorBanner()->message()));
    QVERIFY(!QFileInfo::exists(out_.filePath("full-disk.png")));  // nothing half-written left behind
  }

  void everyExportUnderAFullDiskFailsCleanlyAndTheAppGoesOn() {
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    const RunPtr run = w_->lastRun();
    QDir dir(out_.filePath("full"));
    QVERIFY(dir.mkpath("."));
    {
      FileSizeLimit full(2048);
      QVERIFY(full.ok());
      QVERIFY(!w_->exportImage(run, 3, dir.filePath("one.png")));
      const QString one = w_->errorBanner()->message();
      QVERIFY(!w_->exportAllImages(dir.filePath("all")));
      const QString all = w_->errorBanner()->message();
      qInfo("single image: %s", qPrintable(one));
      qInfo("all images: %s", qPrintable(all));
      QVERIFY2(one.contains(dir.filePath("one.png")) && one.contains("File too large"), qPrintable(one));
      QVERIFY2(all.contains(dir.filePath("all")) && all.contains("File too large"), qPrintable(all));
    }
    QCOMPARE(errors.count(), 2);
    QVERIFY(!QFileInfo::exists(dir.filePath("one.png")));
    const QStringList left = QDir(dir.filePath("all")).entryList(QDir::Files | QDir::Hidden);
    QVERIFY2(left.isEmpty(), qPrintable(left.join(", ")));  // no image, complete or partial, no temp file
    // The app goes on: the same exports work once there is room, and so does the next generation.
    QVERIFY(w_->exportImage(run, 3, dir.filePath("one.png")));
    QVERIFY(w_->exportAllImages(dir.filePath("all")));
    QCOMPARE(QDir(dir.filePath("all")).entryList(QDir::Files).size(), run->imageCount());
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
  }
};

QTEST_MAIN(ExportImportTest)
#include "export_import_test.moc"
