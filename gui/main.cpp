// The Octodiff desktop app: starts on the remembered model, else the embedded demo model (or,
// until that exists, the tiny random test model, labelled as such).
#include <QApplication>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Octodiff");
  QApplication::setApplicationName("Octodiff");
  QApplication::setApplicationVersion(OCTODIFF_VERSION);
  octodiff::gui::MainWindowOptions options;
  if (argc > 1) options.modelPath = QString::fromLocal8Bit(argv[1]);  // octodiff [MODEL]
  octodiff::gui::MainWindow window(options);
  window.show();
  return app.exec();
}
