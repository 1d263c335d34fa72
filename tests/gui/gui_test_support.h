// Shared helpers for the QtTest GUI tests: a private settings location, the tiny model, and
// waiting for the worker without blocking the event loop.
#pragma once

#include <QDir>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <memory>
#include <csignal>
#include <sys/resource.h>

#include "main_window.h"

namespace octodiff::gui::test {

inline QString tinyModelPath() {
  return QStringLiteral(OCTODIFF_TEST_DATA_DIR "/tiny-sd");
}
inline QString resultsDir() {
  QDir().mkpath(QStringLiteral(OCTODIFF_TEST_RESULTS_DIR));
  return QStringLiteral(OCTODIFF_TEST_RESULTS_DIR);
}

// Points QSettings (and QStandardPaths) at a temporary folder so no test reads or writes the
// user's settings. Call before any window exists; keep the returned folder alive.
inline std::unique_ptr<QTemporaryDir> useTemporarySettings() {
  auto dir = std::make_unique<QTemporaryDir>();
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, dir->path());
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir->path());
  QCoreApplication::setOrganizationName(QStringLiteral("Octodiff"));
  QCoreApplication::setApplicationName(QStringLiteral("Octodiff"));
  return dir;
}

// A window on the tiny random model, shown, with the model loaded.
inline std::unique_ptr<MainWindow> openWindow(const QString& model = tinyModelPath(),
                                              bool expectLoad = true) {
  MainWindowOptions options;
  options.modelPath = model;
  auto w = std::make_unique<MainWindow>(options);
  QSignalSpy ready(w.get(), &MainWindow::modelReady);
  QSignalSpy failed(w->controller(), &GenerationController::modelLoadFailed);
  w->show();
  if (expectLoad && !w->controller()->model()) {
    for (int i = 0; i < 600 && ready.isEmpty() && failed.isEmpty(); ++i) ready.wait(100);
  }
  return w;
}

// Fills the prompt fields and the few settings the tests vary; 2 steps keep runs short.
inline void fillForm(MainWindow& w, const QStringList& prompts, int seed = 0, int steps = 2) {
  w.promptPanel()->setPrompts(prompts);
  w.promptPanel()->setNegativePrompt(QString());
  auto* s = w.settingsPanel();
  s->seedBox()->setValue(seed);
  s->lockBox()->setChecked(true);
  s->stepsBox()->setValue(steps);
  s->widthBox()->setValue(0);
  s->heightBox()->setValue(0);
  s->devicesBox()->setValue(0);
  s->batchBox()->setValue(1);
  s->dtypeBox()->setCurrentIndex(0);
}

inline QStringList eightPrompts() {
  return {"a red fox in the snow", "a lighthouse at dusk", "a bowl of ramen", "an owl on a branch",
          "a sailing boat",        "a cactus in a pot",    "a steam train",   "a jellyfish in deep water"};
}

// Waits (processing events) until the controller's current job ends; returns its outcome.
inline std::optional<JobOutcome> waitForJob(MainWindow& w, int timeoutMs = 300000) {
  QSignalSpy done(w.controller(), &GenerationController::jobFinished);
  QElapsedTimer t;
  t.start();
  while (done.isEmpty() && t.elapsed() < timeoutMs) done.wait(100);
  if (done.isEmpty()) return std::nullopt;
  return done.takeFirst().at(0).value<JobOutcome>();
}

// A full disk as every writer of this process sees it while this lives: files cannot grow past
// `bytes` (RLIMIT_FSIZE; SIGXFSZ ignored, so writes fail with EFBIG as with ENOSPC).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : old_handler_(std::signal(SIGXFSZ, SIG_IGN)) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit small = old_;
    small.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int);
  bool ok_ = false;
};

}  // namespace octodiff::gui::test
