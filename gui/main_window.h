#pragma once

#include <QMainWindow>

namespace octodiff::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace octodiff::gui
