#include "live_mode.h"

#include "generation_controller.h"

namespace octodiff::gui {

LiveMode::LiveMode(GenerationController* controller, QObject* parent) : QObject(parent), controller_(controller) {
  timer_.setSingleShot(true);
  timer_.setInterval(kDefaultDelayMs);
  connect(&timer_, &QTimer::timeout, this, &LiveMode::fire);
  connect(controller_, &GenerationController::jobFinished, this, &LiveMode::onJobFinished);
  connect(controller_, &GenerationController::modelLoaded, this, &LiveMode::inputsChanged);
}

void LiveMode::setActive(bool active) {
  if (active == active_) return;
  active_ = active;
  if (active_) {
    inputsChanged();  // show the current inputs at once
  } else {
    timer_.stop();
    waiting_for_idle_ = false;
  }
}

void LiveMode::inputsChanged() {
  if (active_) timer_.start();  // restarts: only a pause in typing fires
}

void LiveMode::fire() {
  if (controller_->isLoading()) {
    waiting_for_idle_ = false;  // modelLoaded calls inputsChanged again
    return;
  }
  if (controller_->isGenerating()) {
    waiting_for_idle_ = true;
    controller_->cancel();
    return;
  }
  waiting_for_idle_ = false;
  emit regenerateRequested();
}

void LiveMode::onJobFinished() {
  // Queued: the controller reports busy until its finished handlers have returned.
  if (waiting_for_idle_) QMetaObject::invokeMethod(this, &LiveMode::fire, Qt::QueuedConnection);
}

}  // namespace octodiff::gui
