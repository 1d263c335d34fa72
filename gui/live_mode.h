// LiveMode: regenerates the grid while the user types.
//
// Every change of the inputs (prompts, negative prompt, settings) restarts a short debounce
// timer; when it fires, a run in flight is cancelled (the engine stops within one UNet call) and
// a new one starts as soon as the controller is idle, so only the newest inputs are ever
// rendered and nothing queues up behind a slow run. With a few-step model the grid follows the
// typing within seconds. Off by default; the seed stays as it is (a live run never draws a new
// random seed, so the picture changes only with what was typed).
//
// The prompts are encoded ahead: a shorter pause (kAheadDelayMs) with the controller idle asks
// for the current inputs' text encodings (encodeAheadRequested; the window calls
// GenerationController::encodePromptsAhead), so the run the longer pause starts takes them from
// the pipeline's cache instead of beginning with the text encoder (SD 2.x's: ~0.25 s of a
// one-step SD-Turbo image here; SDXL's two towers: over a second).
#pragma once

#include <QObject>
#include <QTimer>

namespace octodiff::gui {

class GenerationController;

class LiveMode : public QObject {
  Q_OBJECT
 public:
  static constexpr int kDefaultDelayMs = 500;
  static constexpr int kAheadDelayMs = 120;  // at most; never more than half the run's delay

  LiveMode(GenerationController* controller, QObject* parent = nullptr);

  bool isActive() const { return active_; }
  void setActive(bool active);
  int delayMs() const { return timer_.interval(); }
  void setDelayMs(int ms);
  int aheadDelayMs() const { return ahead_timer_.interval(); }
  // True from an input change until its run has been asked for (debouncing or waiting for a
  // cancelled run to end).
  bool isPending() const { return timer_.isActive() || waiting_for_idle_; }

 public slots:
  void inputsChanged();

 signals:
  // The window should start a run with the current inputs now (the controller is idle).
  void regenerateRequested();
  // The window may encode the current inputs' prompts ahead of that run (the controller is idle).
  void encodeAheadRequested();

 private:
  void fire();
  void fireAhead();
  void onJobFinished();

  GenerationController* controller_;
  QTimer timer_;
  QTimer ahead_timer_;
  bool active_ = false;
  bool waiting_for_idle_ = false;  // a run was cancelled for newer inputs; start when it ends
};

}  // namespace octodiff::gui
