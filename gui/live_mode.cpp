#include "live_mode.h"

#include <algorithm>

#include "generation_controller.h"

namespace octodiff::gui {

LiveMode::LiveMode(GenerationController* controller, QObject* parent) : QObject(parent), controller_(controller) {
  timer_.setSingleShot(true);
  ahead_timer_.setSingleShot(true);
  setDelayMs(kDefaultDelayMs);
  connect(&timer_, &QTimer::timeout, this, &LiveMode::fire);
  connect(&ahead_timer_, &QTimer::timeout, this, &LiveMode::fireAhead);
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
    ahead_timer_.stop();
    waiting_for_idle_ = false;
  }
}

void LiveMode::setDelayMs(int ms) {
  timer_.setInterval(ms);
  ahead_timer_.setInterval(std::min(kAheadDelayMs, ms / 2));
}

void LiveMode::inputsChanged() {
  if (!active_) return;
  timer_.start();  // restarts: only a pause in typing fires
  ahead_timer_.start();
}

void LiveMode::fireAhead() {
  // Only into an idle controller: a run in flight keeps the cores until the longer pause cancels it.
  if (!controller_->isBusy() && timer_.isActive()) emit encodeAheadRequested();
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
