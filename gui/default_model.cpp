#include "default_model.h"

#include <QDir>
#include <QFileInfo>

#include "pipeline/model.h"

namespace octodiff::gui {
namespace {

bool sameLocation(const QString& a, const QString& b) {
  if (a.isEmpty() || b.isEmpty()) return false;
  const QString ca = QFileInfo(a).canonicalFilePath(), cb = QFileInfo(b).canonicalFilePath();
  return !ca.isEmpty() && ca == cb;
}

}  // namespace

QString demoModelPath() {
  return QString::fromStdString(StableDiffusionModel::default_model_path().string());
}

QString tinyTestModelPath() {
#ifdef OCTODIFF_GUI_TINY_MODEL_DIR
  const QString p = QStringLiteral(OCTODIFF_GUI_TINY_MODEL_DIR);
  if (QFileInfo::exists(p + QStringLiteral("/model_index.json"))) return QDir::cleanPath(p);
#endif
  return {};
}

QString defaultModelPath() {
  const QString demo = demoModelPath();
  if (QFileInfo::exists(demo + QStringLiteral("/model_index.json"))) return demo;
  const QString tiny = tinyTestModelPath();
  return tiny.isEmpty() ? demo : tiny;
}

QString modelLabel(const QString& path) {
  if (sameLocation(path, tinyTestModelPath())) return QObject::tr("tiny random test model (makes noise)");
  if (sameLocation(path, demoModelPath())) return QObject::tr("embedded demo model");
  QFileInfo info(QDir::cleanPath(path));
  return info.isDir() ? info.fileName() : info.completeBaseName();
}

}  // namespace octodiff::gui
