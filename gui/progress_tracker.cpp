#include "progress_tracker.h"

#include <algorithm>
#include <cmath>

namespace octodiff::gui {

// Share of a run's time each phase is counted for: denoising is nearly all of it.
constexpr double kTextShare = 0.03, kDecodeShare = 0.07, kDenoiseShare = 1.0 - kTextShare - kDecodeShare;

void ProgressTracker::startJob(int runs, double now) {
  runs_ = std::max(1, runs);
  run_ = 0;
  started_ = now;
  startRun(0, 1, 1);
}

void ProgressTracker::startRun(int index, int devices, int steps) {
  run_ = index;
  steps_ = std::max(1, steps);
  steps_done_.assign(std::max(1, devices), 0);
  text_done_ = false;
  run_done_ = false;
  phase_ = Phase::Compile;
}

void ProgressTracker::onEvent(const ProgressEvent& e) {
  phase_ = e.phase;
  switch (e.phase) {
    case Phase::Compile:
    case Phase::TextEncode:
      break;
    case Phase::Denoise:
      text_done_ = true;
      if (e.total_steps > 0) steps_ = e.total_steps;  // UNet calls (PNDM under torch: N + 1)
      if (e.device >= 0 && e.device < devices())
        steps_done_[e.device] = std::max(steps_done_[e.device], e.step);
      break;
    case Phase::Decode:
      text_done_ = true;
      break;
    case Phase::Done:
      run_done_ = true;
      break;
  }
}

void ProgressTracker::finishRun() {
  run_done_ = true;
}

double ProgressTracker::deviceFraction(int d) const {
  if (run_done_) return 1.0;
  if (d < 0 || d >= devices()) return 0.0;
  return std::min(1.0, static_cast<double>(steps_done_[d]) / steps_);
}

double ProgressTracker::runFraction() const {
  if (run_done_) return 1.0;
  double denoise = 0;
  for (int d = 0; d < devices(); ++d) denoise += deviceFraction(d);
  denoise /= devices();
  double f = (text_done_ ? kTextShare : 0.0) + kDenoiseShare * denoise;
  if (phase_ == Phase::Decode) f = kTextShare + kDenoiseShare;
  return std::min(1.0, f);
}

double ProgressTracker::overallFraction() const {
  return std::min(1.0, (run_ + runFraction()) / runs_);
}

std::optional<double> ProgressTracker::etaSeconds(double now) const {
  const double f = overallFraction();
  const double elapsed = now - started_;
  if (f < 0.02 || elapsed <= 0) return std::nullopt;
  return elapsed * (1.0 - f) / f;
}

QString ProgressTracker::phaseText() const {
  QString run = runs_ > 1 ? QStringLiteral("run %1/%2: ").arg(run_ + 1).arg(runs_) : QString();
  switch (run_done_ ? Phase::Done : phase_) {
    case Phase::Compile:
      return run + QStringLiteral("preparing the plan");
    case Phase::TextEncode:
      return run + QStringLiteral("encoding the prompts");
    case Phase::Denoise:
      return run + QStringLiteral("denoising");
    case Phase::Decode:
      return run + QStringLiteral("decoding the latents");
    case Phase::Done:
      return run + QStringLiteral("done");
  }
  return {};
}

QString formatDuration(double s) {
  if (s < 0) s = 0;
  if (s < 1.0) return QStringLiteral("%1 ms").arg(s * 1000.0, 0, 'f', s < 0.01 ? 2 : 0);
  if (s < 60.0) return QStringLiteral("%1 s").arg(s, 0, 'f', s < 10 ? 2 : 1);
  const int total = static_cast<int>(std::lround(s));
  return QStringLiteral("%1 min %2 s").arg(total / 60).arg(total % 60, 2, 10, QLatin1Char('0'));
}

}  // namespace octodiff::gui
