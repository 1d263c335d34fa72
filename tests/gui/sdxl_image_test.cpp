// Image to image and inpainting of an SDXL model in the app (the tiny random SDXL,
// tests/data/tiny-sdxl): nothing in the app is SD-specific for them — "Vary" on a tile makes
// variations, a painted mask inpaints, and the saved PNG brings the image-to-image settings back.
#include <QComboBox>
#include <QPushButton>

#include "gui_test_support.h"
#include "image_metadata_io.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class SdxlImageTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  QTemporaryDir files_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    QVERIFY(files_.isValid());
    w_ = openWindow(QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sdxl"));
    QVERIFY2(w_->controller()->model(), qPrintable(w_->errorBanner()->message()));
    QVERIFY(w_->controller()->model()->is_sdxl());
  }
  void cleanupTestCase() { w_.reset(); }

  void varyMakesVariationsOfAnSdxlImage() {
    fillForm(*w_, {"a red circle"}, /*seed=*/3, /*steps=*/4);
    // The app reads prompts with A1111 syntax in chunks by default, which SDXL does not take yet
    // (pipeline/sdxl_pipeline.h): plain text in one window.
    auto* s = w_->settingsPanel();
    s->promptSyntaxBox()->setCurrentIndex(s->promptSyntaxBox()->findData(static_cast<int>(PromptSyntax::Plain)));
    s->longPromptsBox()->setCurrentIndex(s->longPromptsBox()->findData(static_cast<int>(LongPrompts::Truncate)));
    QVERIFY(w_->generate());
    const auto made = waitForJob(*w_);
    QVERIFY2(made == std::optional<JobOutcome>(JobOutcome::Completed), qPrintable(w_->errorBanner()->message()));
    const RunPtr first = w_->lastRun();
    QCOMPARE(w_->resultGrid()->tile(0)->image().size(), QSize(32, 32));  // the model's default size

    w_->vary(first, 0);
    InitImagePanel* panel = w_->initImagePanel();
    QVERIFY(panel->hasInitImage());
    QCOMPARE(panel->mode(), VaryMode::Variations);
    QVERIFY(w_->generate());
    const auto outcome = waitForJob(*w_);
    QVERIFY2(outcome == std::optional<JobOutcome>(JobOutcome::Completed), qPrintable(w_->errorBanner()->message()));
    const RunPtr run = w_->lastRun();
    QCOMPARE(run->request.init_images.size(), size_t{1});
    QCOMPARE(run->result.signature.strength, InitImagePanel::kDefaultStrength);
    QCOMPARE(run->devices(), InitImagePanel::kDefaultVariations);
    QCOMPARE(run->result.model_calls, 2);  // Euler: t_start = 4 − int(4 · 0.6)
    QCOMPARE(w_->resultGrid()->tileCount(), InitImagePanel::kDefaultVariations);
  }

  void paintedMaskInpaintsTheSdxlImage() {
    w_->initImagePanel()->paintMaskButton()->click();
    MaskEditor* editor = w_->maskEditor();
    editor->setBrushSize(6);
    editor->paintStroke({{8, 8}, {20, 10}, {22, 22}}, MaskEditor::Tool::Brush);
    QVERIFY(editor->maskedFraction() > 0.05);
    QVERIFY(w_->generate());
    const auto outcome = waitForJob(*w_);
    QVERIFY2(outcome == std::optional<JobOutcome>(JobOutcome::Completed), qPrintable(w_->errorBanner()->message()));
    const RunPtr run = w_->lastRun();
    QCOMPARE(run->request.masks.size(), size_t{1});
    QVERIFY(run->result.signature.inpaint);
    QCOMPARE(w_->resultGrid()->tileCount(), InitImagePanel::kDefaultVariations);
  }

  // The PNG of an SDXL inpainting result records its settings; opening it restores them.
  void savedPngRestoresTheSettings() {
    const RunPtr run = w_->lastRun();
    QVERIFY(run && run->request.masks.size() == 1);
    const QString path = files_.filePath("sdxl-inpaint.png");
    saveImagePng(path, *run, 0);
    const ImportedPng png = importPng(path);
    QCOMPARE(png.metadata.width, 32);
    QVERIFY(png.metadata.inpaint.has_value());
    QVERIFY(png.metadata.inpaint->mode == "latent blend");
    QVERIFY(png.init.strength.has_value());
    QCOMPARE(*png.init.strength, run->result.signature.strength);

    w_->initImagePanel()->setStrength(0.3);
    w_->maskEditor()->clear();
    QVERIFY(w_->importPng(path));
    QCOMPARE(w_->initImagePanel()->strength(), run->result.signature.strength);
  }
};

QTEST_MAIN(SdxlImageTest)
#include "sdxl_image_test.moc"
