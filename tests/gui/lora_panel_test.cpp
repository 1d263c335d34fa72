// The LoRA picker on the tiny random model with tests/data/tiny-sd-lora: a checked LoRA changes the
// image, strength 0 gives the image without it bit for bit, a <lora:NAME:STRENGTH> prompt tag does
// what the check box does (and leaves the prompt), the saved PNG names the LoRA (and
// opening it checks the LoRA again), and files that are
// no LoRA (the folder's goldens file, a hostile one) show an error and leave the app working.
#include <QDoubleSpinBox>
#include <QFile>

#include "gui_test_support.h"
#include "image_metadata_io.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

QString loraDir() {
  return QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sd-lora");
}

}  // namespace

class LoraPanelTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;
  QImage base_;  // the image without LoRA

  LoraListModel* list() { return w_->loraPanel()->model(); }
  void uncheckAll() {
    for (int r = 0; r < list()->rowCount(); ++r) list()->setEnabled(r, false);
  }
  // Generates "a lora test" (seed 3, 2 steps) and returns the image; null when it did not complete.
  QImage generate(const QString& prompt = "a lora test") {
    fillForm(*w_, {prompt}, 3, 2);
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    if (!w_->generate()) return {};
    QSignalSpy done(w_->controller(), &GenerationController::jobFinished);
    for (int i = 0; i < 1200 && done.isEmpty() && errors.isEmpty(); ++i) done.wait(100);
    if (done.isEmpty() || done.first().at(0).value<JobOutcome>() != JobOutcome::Completed) return {};
    return w_->lastRun()->images.at(0);
  }
  // Generates expecting the LoRA merge to fail; returns the error shown.
  QString generateExpectingError() {
    fillForm(*w_, {"a lora test"}, 3, 2);
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    QSignalSpy started(w_->controller(), &GenerationController::jobStarted);
    w_->generate();
    for (int i = 0; i < 600 && errors.isEmpty(); ++i) errors.wait(100);
    if (!started.isEmpty()) return "a job started";
    return errors.isEmpty() ? QString() : errors.first().at(0).toString();
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
    w_->loraPanel()->setFolder(loraDir());
    QStringList names;
    for (const auto& e : list()->entries()) names << e.name;
    QCOMPARE(names, (QStringList{"diffusers_old", "goldens", "kohya", "kohya_ldm", "peft"}));
    // One strength spin box per row, −2…2 in steps of 0.05.
    auto* box = qobject_cast<QDoubleSpinBox*>(
        w_->loraPanel()->view()->indexWidget(list()->index(list()->rowOf("kohya"), LoraListModel::Strength)));
    QVERIFY(box);
    QCOMPARE(box->minimum(), -2.0);
    QCOMPARE(box->maximum(), 2.0);
    QCOMPARE(box->singleStep(), 0.05);
    base_ = generate();
    QVERIFY(!base_.isNull());
  }

  void cleanupTestCase() { w_.reset(); }

  void aCheckedLoraChangesTheImageAndStrengthZeroDoesNot() {
    const int kohya = list()->rowOf("kohya");
    list()->setEnabled(kohya, true);
    const QImage with = generate();
    QVERIFY(!with.isNull());
    QCOMPARE(w_->controller()->model()->loras().size(), size_t{1});
    QCOMPARE(w_->controller()->model()->loras()[0].name, std::string("kohya"));
    QVERIFY(w_->controller()->model()->base_model());  // made from the loaded base
    // Only the layers the LoRA touches were packed again (11 UNet modules, see its README).
    const PackedLayerStats unet = w_->controller()->model()->packed_layer_stats(ModelComponent::UNet);
    qInfo("UNet layers with kohya: %d packed, %d shared with the base", unet.packed, unet.reused);
    QCOMPARE(unet.packed, 11);
    QVERIFY(unet.reused > 50);
    QVERIFY(with != base_);
    // The spin box writes the strength; 0 is applied and changes nothing.
    auto* box = qobject_cast<QDoubleSpinBox*>(
        w_->loraPanel()->view()->indexWidget(list()->index(kohya, LoraListModel::Strength)));
    box->setValue(0.0);
    QCOMPARE(list()->entries()[kohya].strength, 0.0);
    const QImage zero = generate();
    QCOMPARE(w_->controller()->model()->loras().at(0).spec.strength, 0.0f);
    QVERIFY(zero == base_);
    box->setValue(1.0);
    QVERIFY(generate() == with);

    // The saved PNG names the LoRA with its strength and hash.
    const QString png = resultsDir() + "/lora_run.png";
    QVERIFY(w_->exportImage(w_->lastRun(), 0, png));
    const ImportedPng imported = importPng(png);
    QCOMPARE(imported.metadata.loras.size(), size_t{1});
    QCOMPARE(imported.metadata.loras[0].name, std::string("kohya"));
    QCOMPARE(imported.metadata.loras[0].strength, 1.0f);
    QCOMPARE(imported.metadata.loras[0].hash.size(), size_t{12});
    // Opening that PNG checks the LoRA again, with its strength.
    uncheckAll();
    list()->setStrength(kohya, 0.5);
    QVERIFY(w_->importPng(png));
    QVERIFY(list()->entries()[kohya].enabled);
    QCOMPARE(list()->entries()[kohya].strength, 1.0);
    QCOMPARE(list()->selection().size(), size_t{1});
    uncheckAll();
  }

  void aPromptTagDoesWhatTheCheckBoxDoes() {
    const int kohya = list()->rowOf("kohya");
    list()->setEnabled(kohya, true);
    const QImage checked = generate();
    uncheckAll();
    const QImage tagged = generate("a lora test <lora:kohya:1>");
    QVERIFY(!tagged.isNull());
    QVERIFY(tagged == checked);
    QCOMPARE(w_->resultGrid()->tile(0)->promptText(), QString("a lora test"));  // the tag left the prompt
    // A tag naming no file of the folder: an error naming it, nothing runs.
    fillForm(*w_, {"a lora test <lora:nosuch:1>"}, 3, 2);
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    QVERIFY(!w_->generate());
    QVERIFY(!errors.isEmpty());
    QVERIFY2(errors.first().at(0).toString().contains("nosuch"), qPrintable(errors.first().at(0).toString()));
    QVERIFY(generate() == base_);
  }

  void aFileThatIsNoLoraShowsAnErrorAndTheAppGoesOn() {
    list()->setEnabled(list()->rowOf("goldens"), true);
    const QString error = generateExpectingError();
    QVERIFY2(error.contains("goldens.safetensors"), qPrintable(error));
    QVERIFY(w_->errorBanner()->isError());
    QVERIFY(w_->controller()->model()->loras().empty());  // the model stayed as it was
    uncheckAll();
    QVERIFY(generate() == base_);

    // A hostile file: garbage with a huge header length.
    QTemporaryDir dir;
    QFile f(dir.path() + "/hostile.safetensors");
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray("\xff\xff\xff\xff\xff\xff\xff\x7f{\"a\":", 13));
    f.close();
    w_->loraPanel()->setFolder(dir.path());
    QCOMPARE(list()->rowCount(), 1);
    list()->setEnabled(0, true);
    const QString hostile = generateExpectingError();
    QVERIFY2(hostile.contains("hostile.safetensors"), qPrintable(hostile));
    uncheckAll();
    QVERIFY(generate() == base_);
  }

  void theFolderAndTheChecksAreRemembered() {
    w_->loraPanel()->setFolder(loraDir());
    list()->setStrength(list()->rowOf("peft"), -0.75);
    list()->setEnabled(list()->rowOf("peft"), true);
    QVERIFY(!generate().isNull());  // a run saves the settings
    auto second = openWindow();
    LoraListModel* restored = second->loraPanel()->model();
    QCOMPARE(second->loraPanel()->folder(), loraDir());
    QCOMPARE(restored->selectionText(), QStringList{"peft=-0.75"});
    uncheckAll();
  }
};

QTEST_MAIN(LoraPanelTest)
#include "lora_panel_test.moc"
