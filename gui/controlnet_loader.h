// ControlNetLoader: the ControlNets the ControlNet panel's units name, loaded with
// pipeline/controlnet.h's load_controlnet off the UI thread (a private one-thread pool, one load
// at a time, in the order asked) and kept by (path, dtype) while a unit uses them. A failed
// load is remembered with its message, so a run reports it instead of loading again; reload()
// forgets it.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QThreadPool>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/generation.h"

namespace octodiff::gui {

using ControlNetPtr = std::shared_ptr<const ControlNetModel>;

class ControlNetLoader : public QObject {
  Q_OBJECT
 public:
  explicit ControlNetLoader(QObject* parent = nullptr);
  ~ControlNetLoader() override;  // waits for a load in flight

  // The loaded model; null when it is not (yet) loaded or failed.
  ControlNetPtr find(const QString& path, ComputeDType dtype) const;
  // Why loading it failed; empty when it did not (or was not tried).
  QString failure(const QString& path, ComputeDType dtype) const;
  bool isLoading(const QString& path, ComputeDType dtype) const;
  // Loading, or queued (true until `loaded`/`failed` of the last one was emitted).
  bool isBusy() const { return !loading_.first.isEmpty() || !queue_.empty(); }

  // Queues loading `path` at `dtype` unless it is loaded, queued or failed.
  void load(const QString& path, ComputeDType dtype);
  // Forgets a failure (or the loaded model) and loads it again.
  void reload(const QString& path, ComputeDType dtype);
  // Drops the models (and failures) of every path not in `paths`, and those of `paths` at
  // another dtype than `dtype` (a run in flight keeps its own reference).
  void keepOnly(const QStringList& paths, ComputeDType dtype);

 signals:
  void loaded(const QString& path);
  void failed(const QString& path, const QString& message);
  void idle();  // the queue is empty and nothing is loading

 private:
  using Key = std::pair<QString, int>;  // canonical path, ComputeDType
  struct Outcome {
    Key key;
    ControlNetPtr model;
    QString error;
  };
  static Key keyOf(const QString& path, ComputeDType dtype);
  void startNext();
  void onFinished();

  QThreadPool pool_;
  QFutureWatcher<Outcome> watcher_;
  std::vector<Key> queue_;
  Key loading_;  // what the pool loads; empty path when nothing (cleared once its outcome is handled)
  std::map<Key, ControlNetPtr> models_;
  std::map<Key, QString> failures_;
};

}  // namespace octodiff::gui
