// Image to image in the app, without running a model: the mask editor (strokes, eraser, undo,
// invert, clear, the mask's size), the request the form assembles from an init image, strength
// and mask, files opened or dropped as the init image (and the errors for files that are not
// images), and what reopening a PNG restores of the image-to-image settings.
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QMimeData>
#include <QUrl>

#include "gui_test_support.h"
#include "image_metadata_io.h"
#include "io/png.h"
#include "pipeline/metadata.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

// A 64 × 48 picture whose every pixel differs from its neighbours (so resizes and copies show).
QImage testPicture(int w = 64, int h = 48) {
  QImage image(w, h, QImage::Format_RGB888);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      image.setPixelColor(x, y, QColor((x * 4) % 256, (y * 5) % 256, (x * y) % 256));
  return image;
}

int maskAt(const QImage& mask, int x, int y) {
  return mask.constScanLine(y)[x];
}

int paintedCount(const QImage& mask) {
  int n = 0;
  for (int y = 0; y < mask.height(); ++y)
    for (int x = 0; x < mask.width(); ++x) n += maskAt(mask, x, y) == 255;
  return n;
}

// Every mask pixel is 0 or 255.
bool binary(const QImage& mask) {
  for (int y = 0; y < mask.height(); ++y)
    for (int x = 0; x < mask.width(); ++x)
      if (maskAt(mask, x, y) != 0 && maskAt(mask, x, y) != 255) return false;
  return true;
}

// Sends a drag-enter and a drop of `path` to `target`; returns whether the drag was accepted.
bool dropOn(QWidget* target, const QString& path) {
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(path)});
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &enter);
  QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &drop);
  return enter.isAccepted();
}

}  // namespace

class InitImageTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  QTemporaryDir files_;

  std::unique_ptr<MainWindow> windowWithoutModel() {
    MainWindowOptions options;
    options.loadModel = false;
    auto w = std::make_unique<MainWindow>(options);
    fillForm(*w, {"a red circle"}, /*seed=*/7, /*steps=*/10);
    return w;
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    QVERIFY(files_.isValid());
  }

  void strokeUndoInvertClear() {
    MaskEditor editor;
    editor.setImage(testPicture());
    QCOMPARE(editor.mask().size(), QSize(64, 48));
    QCOMPARE(editor.mask().format(), QImage::Format_Grayscale8);
    QCOMPARE(paintedCount(editor.mask()), 0);
    QVERIFY(!editor.hasMask());

    editor.setBrushSize(6);
    editor.paintStroke({{8, 10}, {40, 10}}, MaskEditor::Tool::Brush);
    QImage m = editor.mask();
    QCOMPARE(m.size(), QSize(64, 48));
    QVERIFY(binary(m));
    for (int x : {8, 20, 40}) QCOMPARE(maskAt(m, x, 10), 255);  // on the stroke
    QCOMPARE(maskAt(m, 24, 30), 0);                             // far from it
    QCOMPARE(maskAt(m, 50, 10), 0);                             // beyond its end
    const int painted = paintedCount(m);
    // About a 32 × 6 band with round ends: 192 + π·9 ≈ 220 pixels.
    QVERIFY2(painted > 170 && painted < 270, qPrintable(QString::number(painted)));
    QVERIFY(editor.hasMask());
    QCOMPARE(editor.maskedFraction(), painted / double(64 * 48));

    editor.paintStroke({{20, 5}, {20, 15}}, MaskEditor::Tool::Eraser);
    QCOMPARE(maskAt(editor.mask(), 20, 10), 0);
    QCOMPARE(maskAt(editor.mask(), 8, 10), 255);
    QCOMPARE(editor.undoStack()->count(), 2);
    editor.undo();
    QCOMPARE(maskAt(editor.mask(), 20, 10), 255);
    editor.undo();
    QCOMPARE(paintedCount(editor.mask()), 0);
    editor.redo();
    QCOMPARE(paintedCount(editor.mask()), painted);

    editor.invert();
    m = editor.mask();
    QCOMPARE(maskAt(m, 20, 10), 0);
    QCOMPARE(maskAt(m, 24, 30), 255);
    QCOMPARE(paintedCount(m), 64 * 48 - painted);
    editor.clear();
    QCOMPARE(paintedCount(editor.mask()), 0);
    editor.clear();  // nothing to clear: no undo step
    editor.undo();   // back to the inverted mask
    QCOMPARE(paintedCount(editor.mask()), 64 * 48 - painted);

    editor.setImage(testPicture(32, 32));  // a new image: an empty mask of its size, no history
    QCOMPARE(editor.mask().size(), QSize(32, 32));
    QCOMPARE(paintedCount(editor.mask()), 0);
    QVERIFY(!editor.undoStack()->canUndo());
  }

  void mouseStrokeOnTheCanvas() {
    MaskEditor editor;
    editor.resize(400, 400);
    editor.setImage(testPicture());
    editor.show();
    QVERIFY(QTest::qWaitForWindowExposed(&editor));
    editor.setBrushSize(4);
    auto* canvas = editor.findChild<MaskCanvas*>();
    QVERIFY(canvas);
    const QPoint from = canvas->toWidget({10, 30}).toPoint(), to = canvas->toWidget({50, 30}).toPoint();
    QTest::mousePress(canvas, Qt::LeftButton, Qt::NoModifier, from);
    QTest::mouseMove(canvas, canvas->toWidget({30, 30}).toPoint());
    QTest::mouseRelease(canvas, Qt::LeftButton, Qt::NoModifier, to);
    const QImage m = editor.mask();
    for (int x : {10, 20, 30, 40, 50}) QCOMPARE(maskAt(m, x, 30), 255);
    QCOMPARE(maskAt(m, 30, 10), 0);
    QCOMPARE(editor.undoStack()->count(), 1);  // one drag, one undo step
  }

  void requestCarriesInitImageStrengthAndMask() {
    auto w = windowWithoutModel();
    InitImagePanel* panel = w->initImagePanel();
    QString error;
    auto plain = w->requestFromForm(&error);
    QVERIFY2(plain, qPrintable(error));
    QVERIFY(plain->init_images.empty());  // no init image: text to image

    const QImage picture = testPicture();
    panel->setInitImage(picture, "test picture");
    QVERIFY(panel->strengthSlider()->isVisibleTo(panel));
    panel->setStrength(0.35);
    panel->variationsBox()->setValue(3);
    auto r = w->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->init_images.size(), size_t{1});
    QCOMPARE(r->init_images[0].width, 64);
    QCOMPARE(r->init_images[0].height, 48);
    QVERIFY(r->init_images[0].rgb == toImage8(picture).rgb);
    QCOMPARE(r->strength, 0.35);
    QCOMPARE(r->devices, 3);  // every device a variation
    QVERIFY(r->masks.empty());

    w->maskEditor()->setBrushSize(8);
    w->maskEditor()->paintStroke({{32, 24}}, MaskEditor::Tool::Brush);
    panel->maskBlurBox()->setValue(6);
    panel->inpaintAreaBox()->setCurrentIndex(1);
    panel->paddingBox()->setValue(40);
    r = w->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->masks.size(), size_t{1});
    const Image8& mask = r->masks[0];
    QCOMPARE(mask.width, 64);
    QCOMPARE(mask.height, 48);
    auto grey = [&](int x, int y) { return mask.rgb[(static_cast<size_t>(y) * mask.width + x) * 3]; };
    QCOMPARE(int(grey(32, 24)), 255);
    QCOMPARE(int(grey(5, 5)), 0);
    QCOMPARE(r->mask_blur, 6);
    QVERIFY(r->inpaint_only_masked);
    QCOMPARE(r->only_masked_padding, 40);

    // A size set in the form: the image and its mask are resized to it.
    w->settingsPanel()->widthBox()->setValue(32);
    w->settingsPanel()->heightBox()->setValue(32);
    r = w->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->init_images[0].width, 32);
    QCOMPARE(r->init_images[0].height, 32);
    QCOMPARE(r->masks[0].width, 32);
    QCOMPARE(r->masks[0].height, 32);

    // One side set: the other keeps the image's aspect (64 × 48 → 32 × 24).
    w->settingsPanel()->heightBox()->setValue(0);
    r = w->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->init_images[0].width, 32);
    QCOMPARE(r->init_images[0].height, 24);

    // Several prompts: each its own device (each a variation), the count is theirs.
    w->settingsPanel()->widthBox()->setValue(0);
    w->settingsPanel()->heightBox()->setValue(0);
    w->promptPanel()->setPrompts({"a red circle", "a blue star"});
    r = w->requestFromForm(&error);
    QVERIFY2(r, qPrintable(error));
    QCOMPARE(r->devices, 0);
    QCOMPARE(r->prompts.size(), size_t{2});

    panel->clearButton()->click();
    QVERIFY(!panel->hasInitImage());
    r = w->requestFromForm(&error);
    QVERIFY(r && r->init_images.empty() && r->masks.empty());
  }

  void largeImagesRunAtTheModelsArea() {
    InitImagePanel panel;
    panel.setInitImage(testPicture(400, 300), "photo");
    QCOMPARE(panel.runSize(0, 0), QSize(400, 300));  // no model yet: its own size
    panel.setModelSize(64, 64, 32);                  // the demo model
    // 4096 pixels at 4:3 → 73.9 × 55.4, floored to multiples of 32.
    QCOMPARE(panel.runSize(0, 0), QSize(64, 32));
    panel.setModelSize(512, 512, 64);                // SD 1.5
    QCOMPARE(panel.runSize(0, 0), QSize(400, 300));  // fewer pixels than 512²: kept
    panel.setInitImage(testPicture(1600, 1200), "big photo");
    QCOMPARE(panel.runSize(0, 0), QSize(576, 384));  // 591 × 443 floored to 64
    QCOMPARE(panel.runSize(768, 512), QSize(768, 512));
    QVERIFY2(panel.findChild<QLabel*>("initCaption")->text().contains("runs at 576 × 384"),
             qPrintable(panel.findChild<QLabel*>("initCaption")->text()));
    GenerationRequest r;
    r.prompts = {"a photo"};
    panel.applyTo(&r);
    QCOMPARE(r.init_images[0].width, 576);
    QCOMPARE(r.init_images[0].height, 384);
    QCOMPARE(r.width, 0);  // the engine takes the size from the image
  }

  void droppedFiles() {
    auto w = windowWithoutModel();
    w->show();
    QSignalSpy errors(w.get(), &MainWindow::errorShown);

    QFile text(files_.filePath("notes.txt"));
    QVERIFY(text.open(QIODevice::WriteOnly));
    text.write("a shopping list, not a picture\n");
    text.close();
    QVERIFY(dropOn(w.get(), text.fileName()));
    QCOMPARE(errors.count(), 1);
    QVERIFY(w->errorBanner()->isVisible() && w->errorBanner()->isError());
    QVERIFY2(w->errorBanner()->message().contains("notes.txt"), qPrintable(w->errorBanner()->message()));
    QVERIFY(!w->initImagePanel()->hasInitImage());

    // A file named .png that is not one, dropped on the panel itself.
    QFile junk(files_.filePath("junk.png"));
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("\x89PNG but truncated");
    junk.close();
    QVERIFY(dropOn(w->initImagePanel(), junk.fileName()));
    QCOMPARE(errors.count(), 2);
    QVERIFY2(w->errorBanner()->message().contains("junk.png"), qPrintable(w->errorBanner()->message()));
    QVERIFY(!w->initImagePanel()->hasInitImage());

    // A picture without generation settings becomes the init image (a BMP, and a plain PNG).
    const QString bmp = files_.filePath("picture.bmp");
    QVERIFY(testPicture().save(bmp));
    QVERIFY(dropOn(w.get(), bmp));
    QCOMPARE(errors.count(), 2);
    QVERIFY(w->initImagePanel()->hasInitImage());
    QCOMPARE(w->initImagePanel()->initImage().size(), QSize(64, 48));
    QCOMPARE(w->initImagePanel()->origin(), QString("picture.bmp"));
    const QString png = files_.filePath("plain.png");
    write_png(png.toStdString(), toImage8(testPicture(40, 40)), {});
    QVERIFY(dropOn(w->maskEditor(), png));
    QCOMPARE(w->initImagePanel()->initImage().size(), QSize(40, 40));
    QCOMPARE(w->maskEditor()->mask().size(), QSize(40, 40));

    // Transparency is flattened onto white.
    QImage clear(8, 8, QImage::Format_ARGB32);
    clear.fill(Qt::transparent);
    const QString transparent = files_.filePath("transparent.png");
    QVERIFY(clear.save(transparent));
    QVERIFY(w->initImagePanel()->openFile(transparent));
    QCOMPARE(w->initImagePanel()->initImage().pixelColor(3, 3), QColor(Qt::white));
    QCOMPARE(errors.count(), 2);
  }

  void pngRestoresStrengthMaskBlurAndInpaintArea() {
    auto w = windowWithoutModel();
    InitImagePanel* panel = w->initImagePanel();
    const QString path = files_.filePath("a1111.png");
    const std::string parameters =
        "a red circle\nNegative prompt: blurry\nSteps: 20, Sampler: Euler, CFG scale: 7, Seed: 5, Size: "
        "64x48, "
        "Model hash: 0123456789, Denoising strength: 0.45, Mask blur: 8, Inpaint area: Only masked, "
        "Masked area padding: 48, Version: v1.9.0";
    write_png(path.toStdString(), toImage8(testPicture()), {{"parameters", parameters}});
    QVERIFY(w->importPng(path));
    QCOMPARE(panel->strength(), 0.45);
    QCOMPARE(panel->maskBlurBox()->value(), 8);
    QCOMPARE(panel->inpaintAreaBox()->currentData().toBool(), true);
    QCOMPARE(panel->paddingBox()->value(), 48);
    QCOMPARE(w->settingsPanel()->stepsBox()->value(), 20);
    QVERIFY(!panel->hasInitImage());  // not in the metadata: the note says so
    QVERIFY2(w->errorBanner()->message().contains("does not carry"), qPrintable(w->errorBanner()->message()));
    QVERIFY(!w->errorBanner()->isError());

    // Octodiff's own metadata (the JSON chunk) of an image-to-image run, no inpainting keys:
    // the strength is restored, the inpainting options stay as they are.
    ImageMetadata m;
    m.prompts = {"a blue star"};
    m.negative_prompts = {""};
    m.seed = 3;
    m.steps = 12;
    m.width = m.height = 64;
    m.denoising_strength = 0.8;
    const QString octodiff_png = files_.filePath("octodiff.png");
    write_png(octodiff_png.toStdString(), toImage8(testPicture(64, 64)), png_texts(m));
    panel->setInitImage(testPicture(), "kept");
    QVERIFY(w->importPng(octodiff_png));
    QCOMPARE(panel->strength(), 0.8);
    QCOMPARE(panel->maskBlurBox()->value(), 8);
    QVERIFY(panel->hasInitImage());  // the panel's image is kept, and the note says so
    QVERIFY2(w->errorBanner()->message().contains("is kept"), qPrintable(w->errorBanner()->message()));

    // A text-to-image PNG: the form makes that image again, so the init image goes (with a note).
    m.denoising_strength.reset();
    write_png(octodiff_png.toStdString(), toImage8(testPicture(64, 64)), png_texts(m));
    QVERIFY(w->importPng(octodiff_png));
    QVERIFY(!panel->hasInitImage());
    QCOMPARE(panel->strength(), 0.8);  // untouched
    QVERIFY2(w->errorBanner()->message().contains("made from text alone"),
             qPrintable(w->errorBanner()->message()));
  }

  void optionsPersistButNotTheImage() {
    {
      auto w = windowWithoutModel();
      InitImagePanel* panel = w->initImagePanel();
      panel->setInitImage(testPicture(), "test picture");
      panel->setStrength(0.3);
      panel->setMode(VaryMode::SeedComparison);
      panel->setVariations(6);
      panel->maskBlurBox()->setValue(9);
      panel->inpaintAreaBox()->setCurrentIndex(1);
      panel->paddingBox()->setValue(20);
    }
    auto w = windowWithoutModel();
    InitImagePanel* panel = w->initImagePanel();
    QVERIFY(!panel->hasInitImage());
    QCOMPARE(panel->strength(), 0.3);
    QCOMPARE(panel->mode(), VaryMode::SeedComparison);
    QCOMPARE(panel->variations(), 6);
    QCOMPARE(panel->maskBlurBox()->value(), 9);
    QCOMPARE(panel->inpaintAreaBox()->currentData().toBool(), true);
    QCOMPARE(panel->paddingBox()->value(), 20);
    // Back to the defaults for the other tests.
    panel->setStrength(InitImagePanel::kDefaultStrength);
    panel->setMode(VaryMode::Variations);
    panel->setVariations(InitImagePanel::kDefaultVariations);
    panel->maskBlurBox()->setValue(InitImagePanel::kDefaultMaskBlur);
    panel->inpaintAreaBox()->setCurrentIndex(0);
    panel->paddingBox()->setValue(32);
  }

  void initSettingsFromTexts() {
    ImageMetadata m;
    InitImageSettings none = initSettingsFromPng({{"parameters", "a cat\nSteps: 20, Seed: 1"}}, m);
    QVERIFY(!none.strength && !none.mask_blur && !none.only_masked && !none.masked_padding);
    m.denoising_strength = 0.5;
    // A1111 writes "Inpaint area" only for "Only masked": with a mask blur alone it is the whole picture.
    InitImageSettings whole = initSettingsFromPng(
        {{"parameters", "a cat\nSteps: 20, Denoising strength: 0.5, Mask blur: 4, Seed: 1"}}, m);
    QCOMPARE(*whole.strength, 0.5);
    QCOMPARE(*whole.mask_blur, 4);
    QCOMPARE(*whole.only_masked, false);
    QVERIFY(!whole.masked_padding);
    InitImageSettings junk =
        initSettingsFromPng({{"parameters", "a cat\nSteps: 20, Mask blur: lots"}}, ImageMetadata{});
    QVERIFY(!junk.mask_blur);
  }
};

QTEST_MAIN(InitImageTest)
#include "init_image_test.moc"
