// The app's prompt-reading settings: A1111 syntax and chunking by default (the engine and CLI
// default to plain/truncate), persisted with the form, and put into the request.
#include "gui_test_support.h"

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
      QVERIFY(r.embeddings_dir.empty());
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
    QCOMPARE(QString::fromStdString(r.embeddings_dir), folder);
    // A request read from an image's metadata carries no folder: the one shown stays.
    GenerationRequest from_png;
    from_png.prompt_syntax = PromptSyntax::A1111;
    from_png.long_prompts = LongPrompts::Chunk;
    s->setFrom(from_png);
    s->applyTo(&r);
    QCOMPARE(r.prompt_syntax, PromptSyntax::A1111);
    QCOMPARE(r.long_prompts, LongPrompts::Chunk);
    QCOMPARE(QString::fromStdString(r.embeddings_dir), folder);
  }
};

QTEST_MAIN(PromptSettingsTest)
#include "prompt_settings_test.moc"
