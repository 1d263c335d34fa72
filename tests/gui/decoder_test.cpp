// The decoder choice on the tiny random model with tests/data/tiny-taesd: choosing a TAESD reloads
// the model with it, TAESD-decoded images are the latents × 8 (that TAESD's scale; tiny-sd's VAE
// scales by 2), previews come from the TAESD, VAE stays available, reusing an image's
// settings restores its decoder, and a file that is no TAESD
// shows an error while the model loads without it.
#include "gui_test_support.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

QString taesdPath() {
  return QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-taesd");
}

bool chooseTaesd(MainWindow& w, const QString& path) {
  QSignalSpy ready(&w, &MainWindow::modelReady);
  w.decoderPanel()->setTaesdPath(path);
  emit w.decoderPanel()->taesdPathChosen(path);  // as the Folder…/File… buttons do
  return ready.wait(60000);
}

}  // namespace

class DecoderTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
    QVERIFY(!w_->controller()->model()->tiny_autoencoder());
    QCOMPARE(w_->decoderPanel()->decoder(), Decoder::Vae);
  }

  void cleanupTestCase() { w_.reset(); }

  void taesdDecodesAtItsOwnScale() {
    QVERIFY(chooseTaesd(*w_, taesdPath()));
    QVERIFY(w_->controller()->model()->tiny_autoencoder());
    QCOMPARE(w_->decoderPanel()->decoder(), Decoder::Tiny);  // choosing one selects it
    QVERIFY2(w_->decoderPanel()->status().contains("TAESD loaded"), qPrintable(w_->decoderPanel()->status()));
    fillForm(*w_, {"a taesd test"}, 4, 2);
    QSignalSpy previews(w_->controller(), &GenerationController::previewReady);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    const RunPtr run = w_->lastRun();
    QCOMPARE(run->result.signature.decoder, Decoder::Tiny);
    QCOMPARE(run->images.at(0).size(), QSize(32 * 8, 32 * 8));  // tiny-sd's latents are 32×32
    // Previews come from the TAESD too: its size, not the linear map's.
    QVERIFY(!previews.isEmpty());
    QCOMPARE(previews.last().at(2).value<QImage>().size(), QSize(256, 256));

    // The VAE is still there.
    w_->decoderPanel()->setDecoder(Decoder::Vae);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w_->lastRun()->result.signature.decoder, Decoder::Vae);
    QCOMPARE(w_->lastRun()->images.at(0).size(), QSize(64, 64));
    // Reusing the TAESD image's settings chooses TAESD again.
    w_->reuseSettings(run, 0);
    QCOMPARE(w_->decoderPanel()->decoder(), Decoder::Tiny);
    // A new window remembers the TAESD and loads the model with it.
    auto second = openWindow();
    QCOMPARE(second->decoderPanel()->taesdPath(), taesdPath());
    QCOMPARE(second->decoderPanel()->decoder(), Decoder::Tiny);
    QVERIFY(second->controller()->model()->tiny_autoencoder());
  }

  void aFileThatIsNoTaesdShowsAnErrorAndTheModelStillLoads() {
    const QString bad = QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sd-lora/kohya.safetensors");
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    QVERIFY(chooseTaesd(*w_, bad));
    QVERIFY(w_->controller()->model());
    QVERIFY(!w_->controller()->model()->tiny_autoencoder());
    QVERIFY(!errors.isEmpty());
    QVERIFY2(errors.last().at(0).toString().contains("kohya.safetensors"), qPrintable(errors.last().at(0).toString()));
    QVERIFY2(w_->decoderPanel()->status().startsWith("No TAESD loaded"), qPrintable(w_->decoderPanel()->status()));
    // Asking for TAESD now is a clear error; the VAE works.
    w_->decoderPanel()->setDecoder(Decoder::Tiny);
    fillForm(*w_, {"a taesd test"}, 4, 2);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Failed));
    w_->decoderPanel()->setDecoder(Decoder::Vae);
    QVERIFY(w_->generate());
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
  }
};

QTEST_MAIN(DecoderTest)
#include "decoder_test.moc"
