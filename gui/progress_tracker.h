// Turns the engine's progress events into fractions per device, an overall fraction and an ETA.
// Pure bookkeeping on the UI thread (the controller forwards events here); no widgets.
#pragma once

#include <QString>
#include <optional>
#include <vector>

#include "pipeline/generation.h"

namespace octodiff::gui {

class ProgressTracker {
 public:
  // A job of `runs` pipeline runs begins at time `now` (seconds on any steady clock).
  void startJob(int runs, double now);
  // Run `index` (0-based) of the job begins on `devices` devices with `steps` denoising steps.
  void startRun(int index, int devices, int steps);
  void onEvent(const ProgressEvent& event);
  void finishRun();

  int devices() const { return static_cast<int>(steps_done_.size()); }
  int runIndex() const { return run_; }
  int runs() const { return runs_; }
  int stepsPerDevice() const { return steps_; }
  double deviceFraction(int device) const;
  double runFraction() const;
  double overallFraction() const;
  // Seconds left, estimated from the rate so far (nullopt until there is a rate to go on).
  std::optional<double> etaSeconds(double now) const;
  QString phaseText() const;

 private:
  int runs_ = 1, run_ = 0, steps_ = 1;
  double started_ = 0;
  Phase phase_ = Phase::Compile;
  std::vector<int> steps_done_;
  bool text_done_ = false, run_done_ = false;
};

QString formatDuration(double seconds);  // "850 ms", "3.2 s", "2 min 05 s"

}  // namespace octodiff::gui
