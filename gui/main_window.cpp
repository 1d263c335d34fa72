#include "main_window.h"

#include <QLabel>

namespace octodiff::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("Octodiff");
  setCentralWidget(new QLabel("Octodiff"));
  resize(1200, 800);
}

}  // namespace octodiff::gui
