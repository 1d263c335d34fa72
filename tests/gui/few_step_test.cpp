// Few-step models in the app: recognition from the configuration (tiny-lcm: LCMScheduler and an
// LCM-distilled UNet; a Turbo-style Euler-trailing copy of tiny-sd; tiny-sd itself is standard),
// the steps and guidance set on load with a note, the user's own values kept, the standard values
// back for a standard model, the negative prompt greyed out while no pass reads it, and the
// few-step preset.
#include <QFile>

#include "few_step.h"
#include "gui_test_support.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

QString tinyLcmPath() {
  return QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-lcm");
}

// tiny-sd's components linked into `dir`, with a scheduler config naming EulerDiscreteScheduler
// with trailing timesteps (SD-Turbo's).
// The tiny model's parts linked into `dir` with an Euler trailing scheduler configuration (SD-Turbo's),
// plus `extra_keys` ("\"key\": value, …").
bool makeEulerTrailingCopy(const QString& dir, const char* extra_keys = "") {
  for (const char* part : {"model_index.json", "text_encoder", "tokenizer", "unet", "vae"})
    if (!QFile::link(tinyModelPath() + "/" + part, dir + "/" + part)) return false;
  QDir(dir).mkdir("scheduler");
  QFile f(dir + "/scheduler/scheduler_config.json");
  if (!f.open(QIODevice::WriteOnly)) return false;
  f.write(QByteArray(R"({"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085, "beta_end": 0.012,
  "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",)") +
          extra_keys + R"( "steps_offset": 1, "timestep_spacing": "trailing"})");
  return true;
}

bool makeTurboCopy(const QString& dir) {
  return makeEulerTrailingCopy(dir);
}

// A zero-SNR model's configuration (trailing Euler too, but not few-step).
bool makeZeroSnrCopy(const QString& dir) {
  return makeEulerTrailingCopy(dir, R"( "rescale_betas_zero_snr": true,)");
}

}  // namespace

class FewStepTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void recognisesModelsFromTheirConfig() {
    const FewStepProfile lcm = recognizeFewStep(*StableDiffusionModel::load(tinyLcmPath().toStdString()));
    QCOMPARE(lcm.kind, FewStepKind::LcmDistilled);
    QCOMPARE(lcm.values, (SamplingValues{4, 8.0, std::nullopt}));  // LCM is its own scheduler
    const FewStepProfile sd = recognizeFewStep(*StableDiffusionModel::load(tinyModelPath().toStdString()));
    QCOMPARE(sd.kind, FewStepKind::None);
    QCOMPARE(sd.values, standardSampling());
    QTemporaryDir turbo;
    QVERIFY(makeTurboCopy(turbo.path()));
    const FewStepProfile t = recognizeFewStep(*StableDiffusionModel::load(turbo.path().toStdString()));
    QCOMPARE(t.kind, FewStepKind::Turbo);
    QCOMPARE(t.values, (SamplingValues{1, 0.0, std::nullopt}));
    // Zero terminal SNR: a standard model (50 steps at 7.5) that wants CFG rescale 0.7.
    QTemporaryDir zero_snr;
    QVERIFY(makeZeroSnrCopy(zero_snr.path()));
    const FewStepProfile z = recognizeFewStep(*StableDiffusionModel::load(zero_snr.path().toStdString()));
    QCOMPARE(z.kind, FewStepKind::None);
    QCOMPARE(z.values, (SamplingValues{50, 7.5, std::nullopt, 0.7}));
  }

  void loadingAZeroSnrModelSetsCfgRescale() {
    QTemporaryDir dir;
    QVERIFY(makeZeroSnrCopy(dir.path()));
    {
      auto w = openWindow(dir.path());
      QVERIFY2(w->controller()->model(), qPrintable(w->errorBanner()->message()));
      SettingsPanel* s = w->settingsPanel();
      QCOMPARE(s->guidanceRescaleBox()->value(), 0.7);
      QCOMPARE(s->stepsBox()->value(), 50);
      QCOMPARE(s->noiseScheduleBox()->itemText(0), QString("Model's own (zero terminal SNR)"));
      QCOMPARE(w->fewStepPanel()->note(),
               QString("Zero terminal SNR model: 50 steps, guidance 7.5, CFG rescale 0.7 — change freely"));
      // A value the user sets is kept when the model loads again; the note says what it recommends.
      s->guidanceRescaleBox()->setValue(0.3);
      w->close();
    }
    auto again = openWindow(dir.path());
    QCOMPARE(again->settingsPanel()->guidanceRescaleBox()->value(), 0.3);
    QVERIFY2(again->fewStepPanel()->note().contains("CFG rescale 0.7 recommended — your settings were kept"),
             qPrintable(again->fewStepPanel()->note()));
    // It runs with its own schedule and the rescale.
    again->settingsPanel()->guidanceRescaleBox()->setValue(0.7);
    again->settingsPanel()->stepsBox()->setValue(2);
    again->promptPanel()->setPrompts({"a zero-snr test"});
    QVERIFY(again->generate());
    QCOMPARE(waitForJob(*again), std::optional<JobOutcome>(JobOutcome::Completed));
    QVERIFY(again->lastRun()->result.signature.zero_snr);
    again.reset();
    settings_dir_ = useTemporarySettings();  // the next tests start from a fresh form
  }

  void adviceKeepsTheUsersOwnValues() {
    const FewStepProfile lcm{FewStepKind::LcmDistilled, {4, 8.0, std::nullopt}, "x"};
    // Standard values: replaced.
    SamplingAdvice a = adviseSampling(lcm, standardSampling(), std::nullopt);
    QVERIFY(a.apply && a.remember);
    QVERIFY(a.note.contains("4 steps, guidance 8 — change freely"));
    // Values the user chose: kept, the note says what the model wants.
    a = adviseSampling(lcm, {6, 2.0, std::nullopt}, SamplingValues{4, 8.0, std::nullopt});
    QVERIFY(!a.apply && !a.remember);
    QVERIFY2(a.note.contains("kept"), qPrintable(a.note));
    // What the app set last time: replaced (here by a standard model's values).
    a = adviseSampling(FewStepProfile{}, {1, 0.0, std::nullopt}, SamplingValues{1, 0.0, std::nullopt});
    QVERIFY(a.apply);
    QCOMPARE(a.values, standardSampling());
    QVERIFY(a.note.isEmpty());
  }

  void loadingAFewStepModelSetsStepsAndGuidance() {
    auto w = openWindow(tinyLcmPath());
    QVERIFY2(w->controller()->model(), qPrintable(w->errorBanner()->message()));
    SettingsPanel* s = w->settingsPanel();
    QCOMPARE(s->stepsBox()->value(), 4);
    QCOMPARE(s->guidanceBox()->value(), 8.0);
    QCOMPARE(s->schedulerBox()->currentIndex(), 0);
    QCOMPARE(s->schedulerBox()->itemText(0), QString("Model's own (LCM)"));
    QVERIFY(w->fewStepPanel()->noteLabel()->isVisibleTo(w.get()));
    QCOMPARE(w->fewStepPanel()->note(),
             QString("Few-step model (LCM-distilled UNet, guidance embedded): 4 steps, guidance 8 — change freely"));
    // No pass reads a negative prompt: the field is greyed out, its text kept, the tooltip says why.
    QLineEdit* negative = w->promptPanel()->negativeField();
    QVERIFY(!negative->isEnabled());
    QVERIFY2(negative->toolTip().contains("LCM-distilled"), qPrintable(negative->toolTip()));
    QCOMPARE(negative->placeholderText(), QString("Not used by this model (guidance is built into its UNet)"));
    // It runs as recognised: one UNet pass a step, guidance embedded; a negative prompt typed for
    // another model stays in the field and is not sent (no warning, not in the metadata).
    w->promptPanel()->setPrompts({"a few-step test"});
    w->promptPanel()->setNegativePrompt("blurry");
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    QVERIFY(w->lastRun()->result.warnings.empty());
    QCOMPARE(w->lastRun()->result.negative_prompts, std::vector<std::string>{""});
    QCOMPARE(negative->text(), QString("blurry"));
    w->promptPanel()->setNegativePrompt(QString());
    const Signature& sig = w->lastRun()->result.signature;
    QVERIFY(sig.embedded_guidance);
    QVERIFY(!sig.guidance);
    QCOMPARE(sig.steps, 4);
    QCOMPARE(sig.scheduler, SchedulerKind::Lcm);

    // A standard model next, the values untouched: back to the standard ones, no note.
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadModel(tinyModelPath(), {});
    QVERIFY(ready.wait(60000));
    QCOMPARE(s->stepsBox()->value(), 50);
    QCOMPARE(s->guidanceBox()->value(), 7.5);
    QVERIFY(!w->fewStepPanel()->noteLabel()->isVisibleTo(w.get()));
    QVERIFY(negative->isEnabled());
    QCOMPARE(negative->placeholderText(), QString("What to steer away from (every image)"));
    s->guidanceBox()->setValue(1.0);  // one pass on the prompts alone
    QVERIFY(!negative->isEnabled());
    QVERIFY2(negative->toolTip().contains("guidance 1 or less"), qPrintable(negative->toolTip()));
    s->guidanceBox()->setValue(7.5);
    QVERIFY(negative->isEnabled());

    // The user's own values survive loading the few-step model.
    s->stepsBox()->setValue(6);
    s->guidanceBox()->setValue(2.0);
    w->loadModel(tinyLcmPath(), {});
    QVERIFY(ready.wait(60000));
    QCOMPARE(s->stepsBox()->value(), 6);
    QCOMPARE(s->guidanceBox()->value(), 2.0);
    QVERIFY2(w->fewStepPanel()->note().contains("your settings were kept"), qPrintable(w->fewStepPanel()->note()));
  }

  void thePresetSetsLcmFourStepsGuidanceOnePointFive() {
    auto w = openWindow();
    QVERIFY(w->controller()->model());
    QVERIFY(w->fewStepPanel()->note().isEmpty());
    w->fewStepPanel()->presetButton()->click();
    SettingsPanel* s = w->settingsPanel();
    QCOMPARE(s->stepsBox()->value(), 4);
    QCOMPARE(s->guidanceBox()->value(), 1.5);
    QCOMPARE(s->schedulerBox()->currentText(), QString("LCM"));
    QVERIFY(w->fewStepPanel()->note().contains("LCM-LoRA"));
    w->promptPanel()->setPrompts({"a preset test"});
    QVERIFY(w->generate());
    QCOMPARE(waitForJob(*w), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w->lastRun()->result.signature.scheduler, SchedulerKind::Lcm);
    QVERIFY(w->lastRun()->result.signature.guidance);  // 1.5 > 1: two passes on a plain UNet
  }
};

QTEST_MAIN(FewStepTest)
#include "few_step_test.moc"
