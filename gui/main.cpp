#include <QApplication>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Octodiff");
  QApplication::setApplicationName("Octodiff");
  octodiff::gui::MainWindow window;
  window.show();
  return app.exec();
}
