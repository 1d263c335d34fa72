// The app's prompt-reading settings: A1111 syntax and chunking by default (the engine and CLI
// default to plain/truncate), clip skip 1, persisted with the form, and put into the request; a
// reopened A1111 PNG's clip skip; and the SDXL size conditioning of a reopened PNG carried into
// the next request.
#include "gui_test_support.h"
#include "io/png.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

class PromptSettingsTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;

 private slots:
  void initTestCase() { settings_dir_ = useTemporarySettings(); }

  void appDefaultsToA1111AndChunksAndPersistsTheChoice() {
    const QString folder = QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sd-prompts/embeddings");
    {
      auto w = openWindow();
      auto* s = w->settingsPanel();
      GenerationRequest r;
      s->applyTo(&r);
      QCOMPARE(r.prompt_syntax, PromptSyntax::A1111);
      QCOMPARE(r.long_prompts, LongPrompts::Chunk);
      QCOMPARE(r.clip_skip, 1);
      QVERIFY(r.embeddings_dir.empty());
      s->clipSkipBox()->setValue(2);
      s->promptSyntaxBox()->setCurrentIndex(s->promptSyntaxBox()->findData(static_cast<int>(PromptSyntax::Plain)));
      s->longPromptsBox()->setCurrentIndex(s->longPromptsBox()->findData(static_cast<int>(LongPrompts::Truncate)));
      s->embeddingsEdit()->setText(folder);
      w->close();
    }
    auto w = openWindow();
    auto* s = w->settingsPanel();
    GenerationRequest r;
    s->applyTo(&r);
    QCOMPARE(r.prompt_syntax, PromptSyntax::Plain);
    QCOMPARE(r.long_prompts, LongPrompts::Truncate);
    QCOMPARE(r.clip_skip, 2);
    QCOMPARE(QString::fromStdString(r.embeddings_dir), folder);
    // A request read from an image's metadata carries no folder: the one shown stays.
    GenerationRequest from_png;
    from_png.prompt_syntax = PromptSyntax::A1111;
    from_png.long_prompts = LongPrompts::Chunk;
    s->setFrom(from_png);
    s->applyTo(&r);
    QCOMPARE(r.prompt_syntax, PromptSyntax::A1111);
    QCOMPARE(r.long_prompts, LongPrompts::Chunk);
    QCOMPARE(r.clip_skip, 1);
    QCOMPARE(QString::fromStdString(r.embeddings_dir), folder);
  }

  // An A1111 image made at "Clip skip: 2" reopens at clip skip 2, and the next run takes it; what
  // cannot be had here (its Karras schedule, its torch noise) is said in the banner.
  void reopenedA1111ClipSkipGoesIntoTheNextRequest() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("anime.png"));
    const std::string parameters =
        "a cat\nSteps: 2, Sampler: DPM++ 2M Karras, CFG scale: 5, Seed: 7, Size: 32x32, Model: tiny, Clip "
        "skip: 2";
    write_png(path.toStdString(), Image8{4, 4, std::vector<uint8_t>(4 * 4 * 3, 128)}, {{"parameters", parameters}});
    auto w = openWindow();
    QVERIFY(w->importPng(path));
    GenerationRequest r;
    w->settingsPanel()->applyTo(&r);
    QCOMPARE(r.clip_skip, 2);
    QCOMPARE(w->settingsPanel()->clipSkipBox()->value(), 2);
    QCOMPARE(r.scheduler, std::optional(SchedulerKind::DpmSolverPP));
    // "DPM++ 2M Karras" is the scheduler box's own entry: Karras sigmas go into the next request.
    QCOMPARE(r.karras_sigmas, std::optional(true));
    QCOMPARE(w->settingsPanel()->schedulerBox()->currentText(), QStringLiteral("DPM++ 2M Karras"));
    const QString banner = w->errorBanner()->message();
    QVERIFY2(!banner.contains(QStringLiteral("Karras")), qPrintable(banner));
    QVERIFY2(banner.contains(QStringLiteral("not the torch noise")), qPrintable(banner));
  }

  void reopenedSdxlSizeOptionsGoIntoTheNextRequest() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("sdxl.png"));
    const std::string parameters =
        "a cat\nSteps: 2, Sampler: Euler, CFG scale: 5, Seed: 7, Size: 32x32, Compat: diffusers, "
        "Original size: 40x48, Crop top: 4, Crop left: 8, Target size: 32x32";
    write_png(path.toStdString(), Image8{4, 4, std::vector<uint8_t>(4 * 4 * 3, 128)}, {{"parameters", parameters}});
    auto w = openWindow();
    QVERIFY(w->importPng(path));  // the app's reopen path
    auto* s = w->settingsPanel();
    GenerationRequest r;
    s->applyTo(&r);
    QCOMPARE(r.compat, Compat::Diffusers);
    QCOMPARE(r.sdxl_size.original_height, 48);
    QCOMPARE(r.sdxl_size.original_width, 40);
    QCOMPARE(r.sdxl_size.crop_top, 4);
    QCOMPARE(r.sdxl_size.crop_left, 8);
    QCOMPARE(r.sdxl_size.target_height, 32);
    QCOMPARE(r.sdxl_size.target_width, 32);
    QVERIFY2(s->sdxlSizeLabel()->text().contains(QStringLiteral("40×48")), qPrintable(s->sdxlSizeLabel()->text()));
    auto* clear = s->findChild<QPushButton*>(QStringLiteral("clearSdxlSize"));
    QVERIFY(clear);
    clear->click();
    s->applyTo(&r);
    QVERIFY(!r.sdxl_size.given());
  }
};

QTEST_MAIN(PromptSettingsTest)
#include "prompt_settings_test.moc"
