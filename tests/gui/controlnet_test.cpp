// ControlNet in the app on the tiny model and tests/data/tiny-controlnet's tiny ControlNets: a run
// set up through the panel (model folder, control image, Canny with the user's thresholds, scale,
// start/end) gives the controller the request octodiff-cli would make, and the very image the
// engine makes from that request; two ControlNets at once; the PNG's metadata names them as the
// CLI does and reopening it restores the panel (the control images excepted: PNG metadata does not
// carry them); bad folders and files are reported. The window is saved as
// test-results/screenshot-controlnet.png (docs/screenshot-controlnet.png is a copy).
#include <QScrollArea>

#include "gui_test_support.h"
#include "io/png.h"
#include "pipeline/controlnet.h"
#include "pipeline/export.h"
#include "preprocess/canny.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

QString cnPath(const QString& name) {
  return QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-controlnet/") + name;
}

bool waitForLoader(ControlNetPanel* panel, int timeoutMs = 120000) {
  QElapsedTimer t;
  t.start();
  while (panel->loader()->isBusy() && t.elapsed() < timeoutMs) QTest::qWait(20);
  return !panel->loader()->isBusy();
}

bool sameImage(const QImage& a, const QImage& b) {
  return a.convertToFormat(QImage::Format_RGB888) == b.convertToFormat(QImage::Format_RGB888);
}

double meanAbsDiff(const QImage& a, const QImage& b) {
  const Image8 x = toImage8(a), y = toImage8(b);
  double sum = 0;
  for (size_t i = 0; i < x.rgb.size(); ++i) sum += std::abs(int(x.rgb[i]) - int(y.rgb[i]));
  return sum / static_cast<double>(x.rgb.size());
}

QString parametersText(const QString& png) {
  std::vector<PngText> texts;
  read_png(png.toStdString(), &texts);
  for (const PngText& t : texts)
    if (t.key == "parameters") return QString::fromStdString(t.text);
  return {};
}

}  // namespace

class ControlNetTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;
  RunPtr two_;  // the run with both ControlNets
  const CannyThresholds thresholds_{80, 160};

  ControlNetPanel* panel() const { return w_->controlNetPanel(); }

  // The image of `request` made by the engine directly, its ControlNet made as octodiff-cli makes it.
  QImage engineImage(GenerationRequest request, bool withControlNet) {
    request.controlnets.clear();
    if (withControlNet) {
      ControlNetUse use;
      use.model = load_controlnet(cnPath("controlnet_a").toStdString(), request.dtype);
      use.name = "controlnet_a";
      use.scale = 0.7;
      use.guidance_start = 0.1;
      use.guidance_end = 0.9;
      use.images = {canny_edges(read_png(cnPath("control_0.png").toStdString()), thresholds_)};
      use.preprocessor = "canny";
      request.controlnets.push_back(use);
    }
    ShardedPipeline pipe(w_->controller()->model());
    return toQImage(result_images(pipe.run(request)).at(0));
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY2(w_->controller()->model(), qPrintable(w_->errorBanner()->message()));
  }
  void cleanupTestCase() { w_.reset(); }

  void thePanelBuildsTheRequest() {
    fillForm(*w_, {"a house by a lake"}, /*seed=*/3, /*steps=*/4);
    QString error;
    auto plain = w_->requestFromForm(&error);
    QVERIFY(plain);
    QVERIFY(plain->controlnets.empty());  // no ControlNet: text to image as before
    QCOMPARE(panel()->unitCount(), 0);
    panel()->addButton()->click();
    QCOMPARE(panel()->unitCount(), 1);
    ControlNetUnitEditor* u = panel()->unit(0);
    u->setModelPath(cnPath("controlnet_a"));
    QVERIFY(!w_->requestFromForm(&error));  // a model without an image
    QVERIFY2(error.contains("ControlNet 1 (controlnet_a) has no control image"), qPrintable(error));

    QVERIFY(u->openImage(cnPath("control_0.png")));
    u->preprocessorBox()->setCurrentIndex(u->preprocessorBox()->findData(int(ControlPreprocessor::Canny)));
    u->lowThresholdBox()->setValue(thresholds_.low);
    u->highThresholdBox()->setValue(thresholds_.high);
    u->scaleBox()->setValue(0.7);
    u->startBox()->setValue(0.1);
    u->endBox()->setValue(0.9);
    QVERIFY(waitForLoader(panel()));
    QVERIFY2(u->modelStatus().contains("controlnet_a: loaded"), qPrintable(u->modelStatus()));

    // The thumbnail beside the image is OpenCV's Canny of it with the panel's thresholds.
    const Image8 edges = canny_edges(read_png(cnPath("control_0.png").toStdString()), thresholds_);
    const int edge_pixels = static_cast<int>(std::count(edges.rgb.begin(), edges.rgb.end(), uint8_t{255}) / 3);
    qInfo("Canny (80, 160) of control_0.png: %d edge pixels of %d", edge_pixels, edges.width * edges.height);
    QVERIFY(edge_pixels > 50);
    QTRY_VERIFY(!u->preprocessedThumbnail()->image().isNull());
    QVERIFY(toImage8(u->preprocessedThumbnail()->image()).rgb == edges.rgb);
    QVERIFY(sameImage(u->imageThumbnail()->image(), toQImage(read_png(cnPath("control_0.png").toStdString()))));

    auto r = w_->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->controlnets.size(), size_t{1});
    const ControlNetUse& c = r->controlnets[0];
    QVERIFY(c.model == panel()->loader()->find(cnPath("controlnet_a"), ComputeDType::F32));
    QVERIFY(c.model);
    QCOMPARE(c.name, std::string("controlnet_a"));
    QCOMPARE(c.scale, 0.7);
    QCOMPARE(c.guidance_start, 0.1);
    QCOMPARE(c.guidance_end, 0.9);
    QCOMPARE(c.preprocessor, std::string("canny"));
    QCOMPARE(c.threshold_a, 80.0);
    QCOMPARE(c.threshold_b, 160.0);
    QCOMPARE(c.images.size(), size_t{1});
    QVERIFY(c.images[0].rgb == edges.rgb);
  }

  // Generate runs what the panel describes: the controller's request carries the ControlNet, and
  // its image is the engine's for the CLI's request, bit for bit; without the ControlNet it differs.
  void generateRunsTheControlNet() {
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    const RunPtr run = w_->lastRun();
    QCOMPARE(run->request.controlnets.size(), size_t{1});
    QCOMPARE(run->request.controlnets[0].name, std::string("controlnet_a"));
    QCOMPARE(run->request.controlnets[0].scale, 0.7);
    QCOMPARE(w_->resultGrid()->tileCount(), 1);
    const QImage image = w_->resultGrid()->tile(0)->image();
    QCOMPARE(image.size(), QSize(64, 64));
    QVERIFY(sameImage(image, engineImage(run->request, true)));
    const double d = meanAbsDiff(image, engineImage(run->request, false));
    qInfo("mean |with ControlNet - without| = %.2f (of 255)", d);
    QVERIFY(d > 0.5);
  }

  void twoControlNetsAtOnce() {
    ControlNetUnitEditor* b = panel()->addUnit();
    QVERIFY(b);
    b->setModelPath(cnPath("controlnet_b"));
    QVERIFY(b->openImage(cnPath("control_1.png")));
    b->scaleBox()->setValue(0.6);
    const QImage single = w_->resultGrid()->tile(0)->image();
    QVERIFY(w_->generate());  // waits for controlnet_b's load, then runs
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    two_ = w_->lastRun();
    QCOMPARE(two_->request.controlnets.size(), size_t{2});
    QCOMPARE(two_->request.controlnets[1].name, std::string("controlnet_b"));
    QCOMPARE(two_->request.controlnets[1].preprocessor, std::string("none"));
    QVERIFY(two_->request.controlnets[1].images[0].rgb == read_png(cnPath("control_1.png").toStdString()).rgb);
    const double d = meanAbsDiff(w_->resultGrid()->tile(0)->image(), single);
    qInfo("mean |two ControlNets - one| = %.2f (of 255)", d);
    QVERIFY(d > 0.5);

    w_->resize(1400, 900);
    QTest::qWait(200);
    w_->findChild<QScrollArea*>("formScroll")->ensureWidgetVisible(panel(), 0, 0);
    QTest::qWait(50);
    const QString path = resultsDir() + "/screenshot-controlnet.png";
    QVERIFY(w_->grab().save(path));
    qInfo("screenshot: %s", qPrintable(path));
  }

  void thePngRecordsAndRestoresThem() {
    QVERIFY(two_);
    QTemporaryDir out;
    const QString png = out.filePath("controlnet.png");
    QVERIFY(w_->exportImage(two_, 0, png));
    const QString params = parametersText(png);
    QVERIFY2(params.contains("ControlNet 0: \"Module: canny, Model: controlnet_a, Weight: 0.7, Threshold A: 80.0, "
                             "Threshold B: 160.0, Guidance Start: 0.1, Guidance End: 0.9\""),
             qPrintable(params));
    QVERIFY2(params.contains("ControlNet 1: \"Module: none, Model: controlnet_b, Weight: 0.6, Guidance Start: 0.0, "
                             "Guidance End: 1.0\""),
             qPrintable(params));

    panel()->clear();
    fillForm(*w_, {"something else"}, /*seed=*/9, /*steps=*/3);
    QVERIFY(w_->importPng(png));
    QCOMPARE(panel()->unitCount(), 2);
    ControlNetUnitEditor *a = panel()->unit(0), *b = panel()->unit(1);
    QCOMPARE(controlNetName(a->modelPath()), QString("controlnet_a"));  // found among the recent ones
    QCOMPARE(QFileInfo(b->modelPath()).canonicalFilePath(), QFileInfo(cnPath("controlnet_b")).canonicalFilePath());
    const ControlNetUnitSettings s = a->settings();
    QCOMPARE(s.preprocessor, ControlPreprocessor::Canny);
    QCOMPARE(s.thresholds.low, 80.0);
    QCOMPARE(s.thresholds.high, 160.0);
    QCOMPARE(s.scale, 0.7);
    QCOMPARE(s.start, 0.1);
    QCOMPARE(s.end, 0.9);
    QCOMPARE(b->settings().scale, 0.6);
    QCOMPARE(b->settings().preprocessor, ControlPreprocessor::None);
    QVERIFY(!a->hasImage() && !b->hasImage());
    QVERIFY2(w_->errorBanner()->message().contains("control images are not in PNG metadata"),
             qPrintable(w_->errorBanner()->message()));

    // With the control images opened again, Generate makes the same image.
    QVERIFY(a->openImage(cnPath("control_0.png")));
    QVERIFY(b->openImage(cnPath("control_1.png")));
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QVERIFY(sameImage(w_->lastRun()->images.at(0), two_->images.at(0)));
  }

  void badInputIsReported() {
    panel()->clear();
    ControlNetUnitEditor* u = panel()->addUnit();
    QSignalSpy shown(w_.get(), &MainWindow::errorShown);
    QVERIFY(!u->openImage(cnPath("README.md")));  // not an image
    QCOMPARE(shown.count(), 1);
    QVERIFY2(shown.last().at(0).toString().contains("README.md"), qPrintable(shown.last().at(0).toString()));
    QVERIFY(u->openImage(cnPath("control_0.png")));
    u->setModelPath(tinyModelPath());  // a Stable Diffusion folder, not a ControlNet
    QVERIFY(waitForLoader(panel()));
    qInfo("status: %s", qPrintable(u->modelStatus()));
    QVERIFY(u->modelStatus().contains("config.json"));
    const int runs = w_->controller()->runsCompleted();
    QVERIFY(!w_->generate());
    QVERIFY2(shown.last().at(0).toString().contains("could not be loaded"), qPrintable(shown.last().at(0).toString()));
    QVERIFY(!w_->controller()->isBusy());
    QCOMPARE(w_->controller()->runsCompleted(), runs);
    u->enabledBox()->setChecked(false);  // switched off: Generate makes images from text again
    QString error;
    auto r = w_->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QVERIFY(r->controlnets.empty());
  }
};

QTEST_MAIN(ControlNetTest)
#include "controlnet_test.moc"
