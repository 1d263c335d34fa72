// MainWindow's ControlNet part: the panel (controlnet_panel.h) in the form, its models loaded for
// the form's dtype before a run, and its settings restored when an image's are. Split from
// main_window.cpp, which holds the layout and the run wiring.
#include <QScrollArea>
#include <QStatusBar>

#include "main_window.h"

namespace octodiff::gui {

void MainWindow::buildControlNetPanel() {
  controlnet_panel_ = new ControlNetPanel;
  controlnet_panel_->setObjectName(QStringLiteral("controlNetPanel"));
  QComboBox* dtype = settings_panel_->dtypeBox();
  auto follow_dtype = [this, dtype] {
    controlnet_panel_->setDType(static_cast<ComputeDType>(dtype->currentData().toInt()));
  };
  follow_dtype();
  connect(dtype, &QComboBox::currentIndexChanged, this, follow_dtype);
  connect(controlnet_panel_, &ControlNetPanel::errorOccurred, this, &MainWindow::reportError);
  connect(controlnet_panel_, &ControlNetPanel::changed, this, [this] {
    if (live_) live_->inputsChanged();  // live mode follows the control image and its settings
  });
}

bool MainWindow::loadControlNetsThen(ComputeDType dtype, std::function<void()> then) {
  banner_->dismiss();
  statusBar()->showMessage(tr("Loading the ControlNets…"));
  controlnet_panel_->loadThen(dtype, std::move(then));
  return true;
}

void MainWindow::restoreControlNets(const ImageMetadata& metadata, QStringList* notes) {
  controlnet_panel_->restore(metadata.controlnets, notes);
  if (metadata.controlnets.empty()) return;
  QMetaObject::invokeMethod(  // queued: the panel may just have grown
      this,
      [this] {
        if (auto* scroll = findChild<QScrollArea*>(QStringLiteral("formScroll")))
          scroll->ensureWidgetVisible(controlnet_panel_, 0, 0);
      },
      Qt::QueuedConnection);
}

}  // namespace octodiff::gui
