// A result tile the safety checker flagged (ImageTile::setFlagged): drawn blurred under "Flagged
// by the safety checker" until clicked, then as it is with a "flagged" badge; the first click
// reveals (it does not enlarge), later clicks enlarge; a new image clears the flag.
// Writes build/test-results/flagged_tile_{covered,revealed}.png.
#include <QImage>
#include <QSignalSpy>
#include <QTest>

#include "gui_test_support.h"
#include "image_tile.h"

using namespace octodiff::gui;

class FlaggedTileTest : public QObject {
  Q_OBJECT

  // A sharp red/green checkerboard: its contrast is what the cover must hide.
  static QImage checkerboard() {
    QImage img(64, 64, QImage::Format_RGB888);
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x) img.setPixelColor(x, y, ((x / 4 + y / 4) % 2) ? QColor(255, 0, 0) : QColor(0, 255, 0));
    return img;
  }

  // How many pixels of the tile are pure red or pure green.
  static int sharpPixels(const QImage& shot) {
    int n = 0;
    for (int y = 0; y < shot.height(); ++y)
      for (int x = 0; x < shot.width(); ++x) {
        const QColor c = shot.pixelColor(x, y);
        n += (c == QColor(255, 0, 0) || c == QColor(0, 255, 0));
      }
    return n;
  }

 private slots:
  void flaggedTileIsCoveredUntilClicked() {
    ImageTile tile(0);
    tile.resize(220, 240);
    tile.show();
    QVERIFY(QTest::qWaitForWindowExposed(&tile));
    tile.setCaption(QStringLiteral("a prompt"), QStringLiteral("seed 1"));
    tile.showFinal(checkerboard());
    const int plain = sharpPixels(tile.grab().toImage());
    tile.setFlagged(true);
    QVERIFY(tile.isFlagged());
    const QImage covered = tile.grab().toImage();
    covered.save(octodiff::gui::test::resultsDir() + "/flagged_tile_covered.png");
    const int hidden = sharpPixels(covered);
    qInfo("sharp checkerboard pixels: plain %d, covered %d", plain, hidden);
    QVERIFY(plain > 10000);
    QCOMPARE(hidden, 0);

    QSignalSpy clicks(&tile, &ImageTile::clicked);
    QTest::mouseClick(&tile, Qt::LeftButton, {}, tile.rect().center());
    QCOMPARE(clicks.count(), 0);  // the first click reveals
    const QImage revealed = tile.grab().toImage();
    revealed.save(octodiff::gui::test::resultsDir() + "/flagged_tile_revealed.png");
    QVERIFY(sharpPixels(revealed) > plain / 2);  // the picture again, under a small badge
    QVERIFY(tile.isFlagged());
    QTest::mouseClick(&tile, Qt::LeftButton, {}, tile.rect().center());
    QCOMPARE(clicks.count(), 1);  // then it enlarges as any tile

    tile.showFinal(checkerboard());  // the next run's image
    QVERIFY(!tile.isFlagged());
    QCOMPARE(sharpPixels(tile.grab().toImage()), plain);
  }
};

QTEST_MAIN(FlaggedTileTest)
#include "flagged_tile_test.moc"
