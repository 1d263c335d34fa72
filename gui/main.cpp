// The Octodiff desktop app: starts on the remembered model, else the embedded demo model (or,
// until that exists, the tiny random test model, labelled as such).
//
//   octodiff [MODEL]       start on this model (a diffusers folder or a single-file checkpoint)
//   octodiff IMAGE.png     start as usual and restore the settings stored in that image (the
//                          desktop entry opens PNG images this way)
#include <QApplication>
#include <QFileInfo>
#include <QIcon>
#include <QTimer>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Octodiff");
  QApplication::setApplicationName("Octodiff");
  QApplication::setApplicationVersion(OCTODIFF_VERSION);
  QGuiApplication::setDesktopFileName("io.github.octodiff.Octodiff");
  QApplication::setWindowIcon(QIcon::fromTheme("io.github.octodiff.Octodiff"));
  octodiff::gui::MainWindowOptions options;
  QString image;
  if (argc > 1) {
    const QString arg = QString::fromLocal8Bit(argv[1]);
    const QFileInfo info(arg);
    if (info.isFile() && info.suffix().compare("png", Qt::CaseInsensitive) == 0)
      image = arg;
    else
      options.modelPath = arg;
  }
  octodiff::gui::MainWindow window(options);
  window.show();
  if (!image.isEmpty()) QTimer::singleShot(0, &window, [&window, image] { window.importPng(image); });
  return app.exec();
}
