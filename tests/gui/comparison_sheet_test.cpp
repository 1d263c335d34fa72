// The comparison sheet tab: axis pickers, a guidance × seed sheet on the tiny model shown with its
// labels and cells sized to their images, export as a labelled PNG and as cells with metadata;
// and the labelled sheet renderer (sheet_render.h) on its own.
#include <QLabel>

#include "gui_test_support.h"
#include "io/png.h"
#include "pipeline/export.h"
#include "pipeline/metadata.h"
#include "sheet_render.h"

using namespace octodiff;
using namespace octodiff::gui;
using namespace octodiff::gui::test;

namespace {

Image8 solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image8 im{w, h, {}};
  for (int i = 0; i < w * h; ++i) im.rgb.insert(im.rgb.end(), {r, g, b});
  return im;
}

// Pixels darker than mid-grey inside a rectangle of a white-background image (drawn text).
int dark_pixels(const Image8& im, int x0, int y0, int w, int h) {
  int n = 0;
  for (int y = y0; y < y0 + h; ++y)
    for (int x = x0; x < x0 + w; ++x)
      if (im.rgb[(static_cast<size_t>(y) * im.width + x) * 3] < 128) ++n;
  return n;
}

std::shared_ptr<const SheetResult> waitForSheet(MainWindow& w, int timeoutMs = 300000) {
  QSignalSpy done(w.controller(), &GenerationController::sheetFinished);
  QSignalSpy stopped(w.controller(), &GenerationController::sheetStopped);
  QElapsedTimer t;
  t.start();
  while (done.isEmpty() && stopped.isEmpty() && t.elapsed() < timeoutMs) done.wait(100);
  if (done.isEmpty()) return nullptr;
  return done.takeFirst().at(0).value<std::shared_ptr<const SheetResult>>();
}

}  // namespace


class ComparisonSheetTest : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> settings_dir_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() {
    qRegisterMetaType<std::shared_ptr<const SheetResult>>();
    settings_dir_ = useTemporarySettings();
    w_ = openWindow();
    QVERIFY(w_->controller()->model());
  }
  void cleanupTestCase() { w_.reset(); }

  void labelledSheetHasTheCellsAndTheLabels() {
    LabelledSheet sheet{2, 3, 1, {}, {"guidance 3", "guidance 7.5"}, {"seed 1", "seed 2", "seed 3"}, {}};
    for (int i = 0; i < 6; ++i) sheet.cells.push_back(solid(64, 48, static_cast<uint8_t>(40 * i), 200, 90));
    const SheetGeometry g = labelled_sheet_geometry(sheet, 2);
    const Image8 im = render_labelled_sheet(sheet, 2);
    qInfo("sheet %d x %d, labels %d px wide, header %d px", im.width, im.height, g.label_width, g.header_height);
    QCOMPARE(im.width, g.width);
    QCOMPARE(im.height, g.height);
    QCOMPARE(g.cell_width, 128);
    QCOMPARE(g.cell_height, 96);
    QCOMPARE(im.width, 2 * g.margin + g.label_width + 2 * 128 + g.gap);
    QCOMPARE(im.height, 2 * g.margin + g.header_height + 3 * 96 + 2 * g.gap);
    QVERIFY(g.label_width > 0 && g.header_height > 0);
    // Every cell at its place, pixel for pixel (corners and centre).
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 2; ++x) {
        const uint8_t red = static_cast<uint8_t>(40 * (y * 2 + x));
        for (auto [dx, dy] : {std::pair{0, 0}, {127, 95}, {64, 48}}) {
          const size_t at = (static_cast<size_t>(g.cell_y(y) + dy) * im.width + g.cell_x(x, 0) + dx) * 3;
          QCOMPARE(im.rgb[at], red);
          QCOMPARE(im.rgb[at + 1], uint8_t{200});
        }
      }
    // Text was drawn in the header and beside the rows.
    QVERIFY(dark_pixels(im, g.cell_x(0, 0), g.margin, 128, g.header_height) > 20);
    QVERIFY(dark_pixels(im, g.margin, g.cell_y(2), g.label_width, 96) > 20);
    // A Z axis: pages side by side, each under its label.
    LabelledSheet z{1, 1, 2, {solid(32, 32, 0, 0, 0), solid(32, 32, 0, 0, 0)}, {"a"}, {}, {"dpm++", "euler"}};
    const SheetGeometry gz = labelled_sheet_geometry(z);
    QVERIFY(gz.page_label_height > 0);
    QCOMPARE(gz.cell_x(0, 1), gz.cell_x(0, 0) + 32 + gz.page_gap);
  }

  void badAxesAreReported() {
    ComparisonSheetView* view = w_->comparisonSheet();
    view->setAxisText(0, "guidance=3, high");
    view->setAxisText(1, "");
    QString error;
    QVERIFY(!view->spec(&error));
    QVERIFY2(error.contains("'high' is not a number"), qPrintable(error));
    QSignalSpy shown(w_.get(), &MainWindow::errorShown);
    view->runButton()->click();
    QCOMPARE(shown.count(), 1);
    QVERIFY(!w_->controller()->isGenerating());
  }

  void guidanceBySeedSheetShowsLabelsAndImageSizedCells() {
    fillForm(*w_, {"a red circle", "a second prompt is not used"}, 0, 2);
    ComparisonSheetView* view = w_->comparisonSheet();
    view->setAxisText(0, "guidance=3, 7.5");
    view->setAxisText(1, "seed=1-2");
    view->setAxisText(2, "");
    QCOMPARE(view->axisText(1), QString("seed=1-2"));
    view->runButton()->click();
    QVERIFY(w_->controller()->isGenerating());
    QCOMPARE(w_->tabs()->currentWidget(), view);
    const auto sheet = waitForSheet(*w_);
    QVERIFY(sheet);
    QCOMPARE(sheet->runs.size(), size_t{2});
    QCOMPARE(view->columnLabels(), (QStringList{"guidance 3", "guidance 7.5"}));
    QCOMPARE(view->rowLabels(), (QStringList{"seed 1", "seed 2"}));
    QVERIFY(view->pageLabels().isEmpty());
    QCOMPARE(view->cellCount(), 4);
    for (int i = 0; i < 4; ++i) {
      QLabel* cell = view->cell(i);
      QVERIFY(!cell->pixmap().isNull());
      QCOMPARE(cell->size(), QSize(128, 128));  // the tiny model's 64×64 image, twice: no empty space
      QCOMPARE(cell->pixmap().size(), QSize(128, 128));
    }
    QTest::qWait(50);  // the layout follows the cells' new sizes
    for (int i = 0; i < 4; ++i)  // each cell wholly visible: the grid made room for its image
      QCOMPARE(view->cell(i)->visibleRegion().boundingRect().size(), QSize(128, 128));
    QVERIFY(view->cell(0)->mapTo(view, QPoint()).x() + 128 <= view->cell(1)->mapTo(view, QPoint()).x());
    // The labels are shown, above the columns and left of the rows.
    auto labels = view->findChildren<QLabel*>("sheetColumnLabel");
    QCOMPARE(labels.size(), 2);
    QVERIFY(labels[0]->isVisible());
    QVERIFY(labels[0]->mapTo(view, QPoint()).y() < view->cell(0)->mapTo(view, QPoint()).y());
    auto rows = view->findChildren<QLabel*>("sheetRowLabel");
    QCOMPARE(rows.size(), 2);
    QVERIFY(rows[1]->mapTo(view, QPoint()).x() < view->cell(2)->mapTo(view, QPoint()).x());
    QCOMPARE(sheet->plan.cells[3].request.prompts[0], std::string("a red circle"));

    // Export: the labelled sheet and the cells with their single runs' metadata.
    QTemporaryDir out;
    QString error;
    QVERIFY2(view->exportSheet(out.filePath("sheet.png"), &error), qPrintable(error));
    const Image8 png = read_png(out.filePath("sheet.png").toStdString());
    const QImage expected = view->labelledSheet();
    QCOMPARE(png.width, expected.width());
    QCOMPARE(png.height, expected.height());
    QVERIFY(png.width > 2 * 128 && png.height > 2 * 128);
    QVERIFY2(view->exportCells(out.filePath("cells"), &error), qPrintable(error));
    const auto meta = parse_png_metadata(read_png_text(out.filePath("cells/cell-4-x2-y2.png").toStdString()));
    QVERIFY(meta.has_value());
    QCOMPARE(meta->seed, int64_t{2});
    QCOMPARE(meta->guidance_scale, 7.5);
    QCOMPARE(meta->devices, 1);
    QVERIFY(QDir().mkpath(out.filePath("full")));
    {  // A full disk: both saves fail with the file's name and the reason, leaving nothing behind.
      FileSizeLimit full(4096);
      QVERIFY(full.ok());
      QVERIFY(!view->exportSheet(out.filePath("full/sheet.png"), &error));
      QVERIFY2(error.contains(out.filePath("full/sheet.png")) && error.contains("File too large"), qPrintable(error));
      QVERIFY(!view->exportCells(out.filePath("full/cells"), &error));
      QVERIFY2(error.contains(out.filePath("full/cells")) && error.contains("File too large"), qPrintable(error));
    }
    QCOMPARE(QDir(out.filePath("full")).entryList(QDir::Files | QDir::Hidden).size(), 0);
    QCOMPARE(QDir(out.filePath("full/cells")).entryList(QDir::Files | QDir::Hidden).size(), 0);
    QVERIFY2(view->exportSheet(out.filePath("full/sheet.png"), &error), qPrintable(error));  // room again
    view->labelledSheet().save(resultsDir() + "/comparison-sheet-tiny.png");
    // The axes are remembered for the next session.
    ComparisonSheetView next;
    QCOMPARE(next.axisText(0), QString("guidance=3, 7.5"));
    QCOMPARE(next.axisText(1), QString("seed=1-2"));
    QCOMPARE(next.axisText(2), QString());
    w_->grab().save(resultsDir() + "/comparison-sheet-tab.png");
  }

  // A click on a cell opens it in the image dialog: the cell's image, with the metadata of the
  // single run it equals (the cell PNG's).
  void clickingACellEnlargesIt() {
    ComparisonSheetView* view = w_->comparisonSheet();
    const auto sheet = view->result();
    QVERIFY(sheet);
    const int cell = 3;  // x = guidance 7.5, y = seed 2
    QVERIFY(w_->findChildren<ImageDialog*>().isEmpty());
    QTest::mouseClick(view->cell(cell), Qt::LeftButton);
    const auto dialogs = w_->findChildren<ImageDialog*>();
    QCOMPARE(dialogs.size(), 1);
    ImageDialog* dialog = dialogs[0];
    qInfo("dialog: %s", qPrintable(dialog->windowTitle()));
    QVERIFY(dialog->windowTitle().contains("cell 4 of 4") && dialog->windowTitle().contains("guidance 7.5 · seed 2"));
    const QImage expected = toQImage(sheet_cell_images(*sheet)[cell]);
    const QImage shown = dialog->findChild<QLabel*>("enlargedImage")->pixmap().toImage();
    QCOMPARE(shown.size(), expected.size() * dialog->zoom());
    QCOMPARE(shown.scaled(expected.size(), Qt::IgnoreAspectRatio, Qt::FastTransformation)
                 .convertToFormat(QImage::Format_RGB888),
             expected);
    QString info;
    for (QLabel* l : dialog->findChildren<QLabel*>())
      if (l->text().contains("Steps: ")) info = l->text();
    const QString cell_text = QString::fromStdString(a1111_parameters(describe_sheet_cell(*sheet, cell)));
    QCOMPARE(info, cell_text.toHtmlEscaped().replace('\n', "<br>"));
    QVERIFY2(info.contains("Seed: 2") && info.contains("CFG scale: 7.5"), qPrintable(info));
    dialog->close();
    QTest::qWait(20);
    QVERIFY(w_->findChildren<ImageDialog*>().isEmpty());
  }

  // The sheet's runs are rows of the run history; double-clicking one shows that sheet again after
  // another one replaced it, its cells still enlarging.
  void aSheetJoinsTheRunHistoryAndReopens() {
    ComparisonSheetView* view = w_->comparisonSheet();
    const auto first = view->result();
    QVERIFY(first);
    RunHistoryModel* h = w_->timingsPanel()->history();
    const int rows = h->rowCount();
    QVERIFY(rows >= 2);
    for (int i : {rows - 2, rows - 1}) {
      QCOMPARE(h->row(i).kind, JobKind::Sheet);
      QCOMPARE(h->sheetAt(i), first);
    }
    QCOMPARE(h->data(h->index(rows - 1, RunHistoryModel::Kind)).toString(), QString("Sheet 2/2"));
    QCOMPARE(h->row(rows - 1).number, h->row(rows - 2).number + 1);

    view->setAxisText(0, "steps=1, 2");
    view->setAxisText(1, "");
    view->runButton()->click();
    const auto second = waitForSheet(*w_);
    QVERIFY(second);
    QCOMPARE(view->cellCount(), 2);
    QCOMPARE(h->rowCount(), rows + 2);
    QCOMPARE(h->sheetAt(rows + 1), second);

    QTableView* table = w_->timingsPanel()->table();
    const QModelIndex row = h->index(rows - 1, RunHistoryModel::Kind);
    table->scrollTo(row);
    const QPoint at = table->visualRect(row).center();
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, at);  // the view wants the press it pairs
    QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, at);  // with the double click
    QCOMPARE(view->result(), first);
    QCOMPARE(w_->tabs()->currentWidget(), view);
    QCOMPARE(view->cellCount(), 4);
    QCOMPARE(view->columnLabels(), (QStringList{"guidance 3", "guidance 7.5"}));
    QCOMPARE(view->rowLabels(), (QStringList{"seed 1", "seed 2"}));
    const std::vector<Image8> images = sheet_cell_images(*first);
    for (int i = 0; i < 4; ++i)
      QCOMPARE(view->cell(i)->pixmap().toImage().scaled(64, 64).convertToFormat(QImage::Format_RGB888),
               toQImage(images[i]));
    QVERIFY(view->cellRun(2));
    QCOMPARE(view->cellRun(2)->images.at(0), toQImage(images[2]));
    QCOMPARE(view->cellRun(2)->seed(), int64_t{2});
  }
};

QTEST_MAIN(ComparisonSheetTest)
#include "comparison_sheet_test.moc"
