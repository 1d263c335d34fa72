// The form's compute dtype through the app: the model's weights are packed for one dtype at load,
// so choosing bfloat16 (or float32 again) loads the model again for it before the run — the run
// then completes in that dtype (it used to stop with "dtype bf16 needs the model loaded for bf16").
// LoRAs checked in the panel are merged into the reloaded model, and float32 again gives the
// float32 image bit for bit.
#include <QComboBox>

#include "gui_test_support.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class DtypeTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

  void chooseDtype(ComputeDType d) {
    QComboBox* box = w_->settingsPanel()->dtypeBox();
    box->setCurrentIndex(box->findData(static_cast<int>(d)));
    QCOMPARE(w_->settingsPanel()->dtype(), d);
  }
  // Generates "a dtype test" (seed 5, 2 steps) in the form's dtype; null when it did not complete.
  QImage generate() {
    QSignalSpy errors(w_.get(), &MainWindow::errorShown);
    QSignalSpy done(w_->controller(), &GenerationController::jobFinished);
    if (!w_->generate()) return {};
    for (int i = 0; i < 1200 && done.isEmpty() && errors.isEmpty(); ++i) done.wait(100);
    if (!errors.isEmpty()) qWarning() << "error shown:" << errors.first().at(0).toString();
    if (done.isEmpty() || done.first().at(0).value<JobOutcome>() != JobOutcome::Completed) return {};
    return w_->lastRun()->images.at(0);
  }
  static int maxChannelDifference(const QImage& a, const QImage& b) {
    const QImage x = a.convertToFormat(QImage::Format_RGB888), y = b.convertToFormat(QImage::Format_RGB888);
    int worst = 0;
    for (int r = 0; r < x.height(); ++r)
      for (int c = 0; c < x.width() * 3; ++c)
        worst = std::max(worst, std::abs(int(x.constScanLine(r)[c]) - int(y.constScanLine(r)[c])));
    return worst;
  }

 private slots:
  void initTestCase() {
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
    QCOMPARE(w_->controller()->model()->dtype(), ComputeDType::F32);
  }
  void cleanupTestCase() { w_.reset(); }

  void bfloat16ReloadsTheModelAndRunsAndFloat32ComesBack() {
    fillForm(*w_, {"a dtype test"}, 5, 2);
    const QImage f32 = generate();
    QVERIFY(!f32.isNull());

    chooseDtype(ComputeDType::BF16);
    QSignalSpy loaded(w_->controller(), &GenerationController::modelLoaded);
    const QImage bf16 = generate();
    QVERIFY2(!bf16.isNull(), "the bfloat16 run did not complete");
    QCOMPARE(loaded.size(), 1);  // loaded again, once
    QCOMPARE(w_->controller()->model()->dtype(), ComputeDType::BF16);
    QCOMPARE(w_->lastRun()->request.dtype, ComputeDType::BF16);
    const int diff = maxChannelDifference(bf16, f32);
    qInfo("bfloat16 vs float32 image: max channel difference %d/255", diff);
    QVERIFY(diff > 0);   // really computed in bfloat16
    QVERIFY(diff <= 4);  // the pipeline tests' 1e-2 of the image range is 2.55 levels; rounding adds 1

    const QImage again = generate();  // same dtype: no reload
    QCOMPARE(loaded.size(), 1);
    QCOMPARE(again, bf16);

    chooseDtype(ComputeDType::F32);
    const QImage back = generate();
    QCOMPARE(loaded.size(), 2);
    QCOMPARE(w_->controller()->model()->dtype(), ComputeDType::F32);
    QCOMPARE(back, f32);  // bit for bit
  }

  void checkedLorasAreMergedIntoTheReloadedModel() {
    w_->loraPanel()->setFolder(QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sd-lora"));
    LoraListModel* list = w_->loraPanel()->model();
    const int kohya = list->rowOf("kohya");
    QVERIFY(kohya >= 0);
    list->setEnabled(kohya, true);
    fillForm(*w_, {"a dtype test"}, 5, 2);
    const QImage f32 = generate();
    QVERIFY(!f32.isNull());
    QCOMPARE(w_->controller()->model()->loras().size(), size_t(1));

    chooseDtype(ComputeDType::BF16);
    const QImage bf16 = generate();
    QVERIFY(!bf16.isNull());
    QCOMPARE(w_->controller()->model()->dtype(), ComputeDType::BF16);
    QCOMPARE(w_->controller()->model()->loras().size(), size_t(1));
    QVERIFY(maxChannelDifference(bf16, f32) <= 4);
    list->setEnabled(kohya, false);
    chooseDtype(ComputeDType::F32);
  }
};

QTEST_MAIN(DtypeTest)
#include "dtype_test.moc"
