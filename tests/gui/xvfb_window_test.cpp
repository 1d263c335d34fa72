// The real main window on a real X server (Xvfb, the xcb platform — not `offscreen`): generate,
// compare seeds, export, with screenshots taken from the X server's framebuffer
// (QScreen::grabWindow), so they show what a user's display would. Run three ways
// (tests/gui/CMakeLists.txt): plain, at 2× scale (QT_SCALE_FACTOR=2) and with a dark palette
// (OCTODIFF_WINDOW_VARIANT=dark). In each, no label or button may be narrower than its text
// needs (clipped text), on every tab — nor, shown as the pointer on a tile shows it, any image
// tile's hover bar (Save, Copy, Reuse, Vary), which must also lie inside its picture.
#include <QAbstractButton>
#include <QApplication>
#include <QLabel>
#include <QPalette>
#include <QScreen>
#include <QStyle>
#include <QStyleFactory>
#include <QTextDocument>

#include "gui_test_support.h"
#include "image_tile.h"
#include "io/png.h"
#include "pipeline/metadata.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

QString variant() { return qEnvironmentVariable("OCTODIFF_WINDOW_VARIANT", QStringLiteral("plain")); }

QPalette darkPalette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(37, 37, 38));
  p.setColor(QPalette::WindowText, QColor(230, 230, 230));
  p.setColor(QPalette::Base, QColor(28, 28, 30));
  p.setColor(QPalette::AlternateBase, QColor(45, 45, 48));
  p.setColor(QPalette::Text, QColor(230, 230, 230));
  p.setColor(QPalette::Button, QColor(50, 50, 53));
  p.setColor(QPalette::ButtonText, QColor(230, 230, 230));
  p.setColor(QPalette::ToolTipBase, QColor(50, 50, 53));
  p.setColor(QPalette::ToolTipText, QColor(230, 230, 230));
  p.setColor(QPalette::PlaceholderText, QColor(150, 150, 150));
  p.setColor(QPalette::Light, QColor(80, 80, 84));
  p.setColor(QPalette::Midlight, QColor(65, 65, 68));
  p.setColor(QPalette::Mid, QColor(140, 140, 145));
  p.setColor(QPalette::Dark, QColor(20, 20, 22));
  p.setColor(QPalette::Shadow, QColor(0, 0, 0));
  p.setColor(QPalette::Highlight, QColor(64, 128, 210));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(110, 170, 255));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(120, 120, 120));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(120, 120, 120));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(120, 120, 120));
  return p;
}

// The widest line of a plain-text label or button text, in pixels of its font.
int textWidth(const QFontMetrics& fm, const QString& text) {
  int w = 0;
  for (const QString& line : text.split(QLatin1Char('\n'))) w = std::max(w, fm.horizontalAdvance(line));
  return w;
}

// Every visible label (plain, not word-wrapped) and button under `root` narrower than its text.
QStringList clippedTexts(QWidget* root) {
  QStringList out;
  for (QLabel* l : root->findChildren<QLabel*>()) {
    if (!l->isVisible() || l->text().isEmpty() || l->wordWrap() || Qt::mightBeRichText(l->text())) continue;
    const int need = textWidth(l->fontMetrics(), l->text()) + 2 * l->margin() + 2 * l->indent() * (l->indent() > 0);
    if (l->contentsRect().width() + 1 < need)
      out << QStringLiteral("label '%1' (%2): %3 px for %4 px of text")
                 .arg(l->text(), l->objectName())
                 .arg(l->contentsRect().width())
                 .arg(need);
  }
  for (QAbstractButton* b : root->findChildren<QAbstractButton*>()) {
    if (!b->isVisible() || b->text().isEmpty()) continue;
    // The text itself, and a check box's or radio button's indicator beside it.
    const bool indicator = b->inherits("QCheckBox") || b->inherits("QRadioButton");
    const int need = textWidth(b->fontMetrics(), b->text()) + (indicator ? b->style()->pixelMetric(QStyle::PM_IndicatorWidth) : 0);
    if (b->width() < need)
      out << QStringLiteral("button '%1' (%2): %3 px, needs %4 px").arg(b->text(), b->objectName()).arg(b->width()).arg(need);
  }
  return out;
}

// Every visible finished tile's hover bar under `root`, shown: cut by its picture's edge, or a
// button in it narrower than its text.
QStringList clippedHoverBars(QWidget* root) {
  QStringList out;
  for (ImageTile* t : root->findChildren<ImageTile*>()) {
    if (!t->isVisible() || !t->isFinal()) continue;
    t->setActionsVisible(true);
    const QWidget* bar = t->actions();
    const QRect picture = bar->parentWidget()->rect();
    if (!bar->isVisible() || !picture.contains(bar->geometry()))
      out << QStringLiteral("tile %1 (%2): hover bar at %3,%4 %5x%6 outside its %7x%8 picture")
                 .arg(t->index())
                 .arg(t->promptText())
                 .arg(bar->x())
                 .arg(bar->y())
                 .arg(bar->width())
                 .arg(bar->height())
                 .arg(picture.width())
                 .arg(picture.height());
    for (const QString& c : clippedTexts(t->actions())) out << QStringLiteral("tile %1's hover bar: %2").arg(t->index()).arg(c);
    t->setActionsVisible(t->underMouse());
  }
  return out;
}

}  // namespace

class XvfbWindowTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;
  QTemporaryDir out_;

  // The window as the X server shows it, saved as test-results/xvfb-<variant>-<step>.png.
  QImage screenshot(const QString& step) {
    QTest::qWait(150);  // let the last paint reach the server
    const QImage shot = w_->screen()->grabWindow(w_->winId()).toImage();
    const QString path = resultsDir() + QStringLiteral("/xvfb-%1-%2.png").arg(variant(), step);
    shot.save(path);
    qInfo("screenshot %s: %dx%d", qPrintable(path), shot.width(), shot.height());
    return shot;
  }

  void expectNothingClipped(const QString& where) {
    const QStringList clipped = clippedTexts(w_.get()) + clippedHoverBars(w_.get());
    QVERIFY2(clipped.isEmpty(), qPrintable(where + ": " + clipped.join("; ")));
  }

 private slots:
  void initTestCase() {
    QCOMPARE(QGuiApplication::platformName(), QStringLiteral("xcb"));  // a real X display, not offscreen
    settings_dir_ = useTemporarySettings();
    if (variant() == QStringLiteral("dark")) {
      QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
      QApplication::setPalette(darkPalette());
    }
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
    w_->resize(1400, 900);
    QVERIFY(QTest::qWaitForWindowExposed(w_.get()));
    qInfo("variant %s: device pixel ratio %.1f, screen %dx%d", qPrintable(variant()), w_->devicePixelRatio(),
          w_->screen()->geometry().width(), w_->screen()->geometry().height());
  }

  void cleanupTestCase() { w_.reset(); }

  void generateCompareSeedsExport() {
    // Generate: four prompts, clicked as a user would.
    fillForm(*w_, {"a red fox in the snow", "a lighthouse at dusk", "a bowl of ramen", "an owl on a branch"}, 7, 3);
    QTest::mouseClick(w_->generateButton(), Qt::LeftButton);
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(w_->resultGrid()->tileCount(), 4);
    const QImage generated = screenshot("generate");
    QCOMPARE(generated.size(), w_->size() * w_->devicePixelRatio());
    expectNothingClipped("after generating");

    // Compare seeds: the same prompts with three seeds side by side.
    SeedComparisonView* view = w_->seedComparison();
    w_->tabs()->setCurrentWidget(view);
    view->setMode(JobKind::SeedComparison);
    view->setSeedsText("3, 5, 8");
    QTest::mouseClick(view->runButton(), Qt::LeftButton);
    QCOMPARE(waitForJob(*w_), std::optional<JobOutcome>(JobOutcome::Completed));
    QCOMPARE(view->columnCount(), 3);
    screenshot("compare-seeds");
    expectNothingClipped("comparing seeds");
    // The pointer on the first seed's first tile (128 px wide here): its hover bar, whole.
    ImageTile* tile = view->column(0)->findChild<ImageTile*>();
    QVERIFY(tile);
    QTest::mouseMove(tile, tile->rect().center());
    tile->setActionsVisible(true);  // as the Enter event does (synthetic moves need not send one)
    qInfo("hover bar over a %d px wide picture: %d column(s), %dx%d", tile->actions()->parentWidget()->width(),
          tile->actionColumns(), tile->actions()->width(), tile->actions()->height());
    screenshot("compare-seeds-hover");

    // Export the last run as a PNG with its settings, and read it back.
    const QString path = out_.filePath("export.png");
    QVERIFY(w_->exportGrid(path));
    std::vector<PngText> texts;
    const Image8 png = read_png(path.toStdString(), &texts);
    QVERIFY(png.width > 0);
    const auto meta = parse_png_metadata(texts);
    QVERIFY(meta.has_value());
    QCOMPARE(meta->seed, int64_t{8});

    // Every tab, for clipped text.
    for (int i = 0; i < w_->tabs()->count(); ++i) {
      w_->tabs()->setCurrentIndex(i);
      QTest::qWait(50);
      expectNothingClipped(QStringLiteral("tab '%1'").arg(w_->tabs()->tabText(i)));
    }
    w_->tabs()->setCurrentIndex(0);
    screenshot("window");
  }
};

QTEST_MAIN(XvfbWindowTest)
#include "xvfb_window_test.moc"
