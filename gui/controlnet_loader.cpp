#include "controlnet_loader.h"

#include <QFileInfo>
#include <QtConcurrent/QtConcurrent>
#include <algorithm>

#include "failure_message.h"
#include "pipeline/controlnet.h"

namespace octodiff::gui {

ControlNetLoader::ControlNetLoader(QObject* parent) : QObject(parent) {
  pool_.setMaxThreadCount(1);
  connect(&watcher_, &QFutureWatcher<Outcome>::finished, this, &ControlNetLoader::onFinished);
}

ControlNetLoader::~ControlNetLoader() {
  queue_.clear();
  watcher_.waitForFinished();
}

ControlNetLoader::Key ControlNetLoader::keyOf(const QString& path, ComputeDType dtype) {
  const QFileInfo info(path.trimmed());
  return {info.exists() ? info.canonicalFilePath() : info.absoluteFilePath(), static_cast<int>(dtype)};
}

ControlNetPtr ControlNetLoader::find(const QString& path, ComputeDType dtype) const {
  const auto it = models_.find(keyOf(path, dtype));
  return it == models_.end() ? nullptr : it->second;
}

QString ControlNetLoader::failure(const QString& path, ComputeDType dtype) const {
  const auto it = failures_.find(keyOf(path, dtype));
  return it == failures_.end() ? QString() : it->second;
}

bool ControlNetLoader::isLoading(const QString& path, ComputeDType dtype) const {
  const Key key = keyOf(path, dtype);
  return loading_ == key || std::find(queue_.begin(), queue_.end(), key) != queue_.end();
}

void ControlNetLoader::load(const QString& path, ComputeDType dtype) {
  if (path.trimmed().isEmpty()) return;
  const Key key = keyOf(path, dtype);
  if (models_.count(key) || failures_.count(key) || isLoading(path, dtype)) return;
  queue_.push_back(key);
  startNext();
}

void ControlNetLoader::reload(const QString& path, ComputeDType dtype) {
  const Key key = keyOf(path, dtype);
  models_.erase(key);
  failures_.erase(key);
  load(path, dtype);
}

void ControlNetLoader::keepOnly(const QStringList& paths, ComputeDType dtype) {
  std::vector<Key> keep;
  for (const QString& p : paths) keep.push_back(keyOf(p, dtype));
  auto unused = [&](const Key& k) { return std::find(keep.begin(), keep.end(), k) == keep.end(); };
  std::erase_if(models_, [&](const auto& entry) { return unused(entry.first); });
  std::erase_if(failures_, [&](const auto& entry) { return unused(entry.first); });
  std::erase_if(queue_, unused);
}

void ControlNetLoader::startNext() {
  if (!loading_.first.isEmpty() || queue_.empty()) return;
  loading_ = queue_.front();
  queue_.erase(queue_.begin());
  const Key key = loading_;
  watcher_.setFuture(QtConcurrent::run(&pool_, [key] {
    Outcome out;
    out.key = key;
    try {
      out.model = load_controlnet(std::filesystem::path(key.first.toStdString()), static_cast<ComputeDType>(key.second));
    } catch (...) {
      FailureContext context;
      context.memoryAdvice = QStringLiteral("A ControlNet needs as much memory as its weights file.");
      context.task = QStringLiteral("loading the ControlNet");
      out.error = describeFailure(std::current_exception(), context);
    }
    return out;
  }));
}

void ControlNetLoader::onFinished() {
  const Outcome out = watcher_.result();
  loading_ = {};
  if (out.model) {
    models_[out.key] = out.model;
    emit loaded(out.key.first);
  } else {
    failures_[out.key] = out.error;
    emit failed(out.key.first, out.error);
  }
  startNext();
  if (!isBusy()) emit idle();
}

}  // namespace octodiff::gui
