#include "controlnet_panel.h"

#include <QFileInfo>
#include <QLabel>
#include <QSettings>
#include <algorithm>
#include <utility>

#include "run_record.h"

namespace octodiff::gui {
namespace {

const char* kRecentKey = "controlnet/recent";

QString dtypeText(ComputeDType d) {
  return d == ComputeDType::BF16 ? QStringLiteral("bfloat16") : QStringLiteral("float32");
}

}  // namespace

ControlNetPanel::ControlNetPanel(QWidget* parent) : QWidget(parent) {
  loader_ = new ControlNetLoader(this);
  connect(loader_, &ControlNetLoader::loaded, this, &ControlNetPanel::onLoaded);
  connect(loader_, &ControlNetLoader::failed, this, &ControlNetPanel::onFailed);
  connect(loader_, &ControlNetLoader::idle, this, &ControlNetPanel::onIdle);
  auto* hint = new QLabel(tr("Steer the images with a control image (edges, pose, depth, …): add a ControlNet "
                             "for the model, choose its folder and open the image. Several add up."));
  hint->setObjectName(QStringLiteral("controlNetHint"));
  hint->setWordWrap(true);
  hint->setStyleSheet(QStringLiteral("color: palette(mid);"));
  add_ = new QPushButton(tr("Add ControlNet"));
  add_->setObjectName(QStringLiteral("addControlNet"));
  connect(add_, &QPushButton::clicked, this, [this] { addUnit(); });
  list_ = new QVBoxLayout;
  list_->setContentsMargins(0, 0, 0, 0);
  list_->setSpacing(6);
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(4);
  column->addWidget(hint);
  column->addLayout(list_);
  column->addWidget(add_, 0, Qt::AlignLeft);
}

ControlNetUnitEditor* ControlNetPanel::addUnit() {
  if (unitCount() >= kMaxUnits) return nullptr;
  auto* unit = new ControlNetUnitEditor;
  units_.push_back(unit);
  list_->addWidget(unit);
  connect(unit, &ControlNetUnitEditor::changed, this, &ControlNetPanel::changed);
  connect(unit, &ControlNetUnitEditor::errorOccurred, this, &ControlNetPanel::errorOccurred);
  connect(unit, &ControlNetUnitEditor::removeRequested, this, [this, unit] {
    const auto it = std::find(units_.begin(), units_.end(), unit);
    if (it != units_.end()) removeUnit(static_cast<int>(it - units_.begin()));
  });
  connect(unit, &ControlNetUnitEditor::modelPathChanged, this, [this, unit](const QString& path) {
    loader_->keepOnly(wantedPaths(), dtype_);
    if (!loader_->failure(path, dtype_).isEmpty())
      loader_->reload(path, dtype_);  // chosen again: try again (the files may have been fixed)
    else if (unit->isOn())
      loader_->load(path, dtype_);
    refreshStatus(unit);
  });
  connect(unit->enabledBox(), &QCheckBox::toggled, this, [this, unit](bool on) {
    if (on) loader_->load(unit->modelPath(), dtype_);
    loader_->keepOnly(wantedPaths(), dtype_);
    refreshStatus(unit);
  });
  renumber();
  refreshStatus(unit);
  add_->setEnabled(unitCount() < kMaxUnits);
  emit changed();
  return unit;
}

void ControlNetPanel::removeUnit(int i) {
  if (i < 0 || i >= unitCount()) return;
  ControlNetUnitEditor* unit = units_[i];
  units_.erase(units_.begin() + i);
  list_->removeWidget(unit);
  unit->hide();
  unit->deleteLater();
  loader_->keepOnly(wantedPaths(), dtype_);
  renumber();
  add_->setEnabled(true);
  emit changed();
}

void ControlNetPanel::clear() {
  while (unitCount() > 0) removeUnit(unitCount() - 1);
}

void ControlNetPanel::renumber() {
  for (int i = 0; i < unitCount(); ++i) units_[i]->setNumber(i + 1);
}

void ControlNetPanel::setDType(ComputeDType dtype) {
  dtype_ = dtype;
  loader_->keepOnly(wantedPaths(), dtype_);
  for (const QString& p : wantedPaths()) loader_->load(p, dtype_);
  for (ControlNetUnitEditor* u : units_) refreshStatus(u);
}

QStringList ControlNetPanel::wantedPaths() const {
  QStringList paths;
  for (const ControlNetUnitEditor* u : units_)
    if (u->isOn() && !u->modelPath().isEmpty()) paths << u->modelPath();
  return paths;
}

bool ControlNetPanel::applyTo(GenerationRequest* r, QString* error) const {
  for (int i = 0; i < unitCount(); ++i) {
    const ControlNetUnitEditor* u = units_[i];
    const ControlNetUnitSettings s = u->settings();
    if (!s.enabled || (s.path.isEmpty() && !u->hasImage())) continue;
    const QString which = tr("ControlNet %1").arg(i + 1);
    QString problem;
    if (s.path.isEmpty())
      problem = tr("%1 has a control image but no model: choose its folder or file").arg(which);
    else if (!u->hasImage())
      problem = tr("%1 (%2) has no control image: open or drop one").arg(which, controlNetName(s.path));
    else if (const QString failure = loader_->failure(s.path, r->dtype); !failure.isEmpty())
      problem = tr("%1 could not be loaded from %2:\n%3").arg(which, s.path, failure);
    const QImage image = problem.isEmpty() ? u->preprocessedImage() : QImage();
    if (problem.isEmpty() && image.isNull()) problem = tr("%1: %2").arg(which, u->preprocessError());
    if (!problem.isEmpty()) {
      if (error) *error = problem;
      return false;
    }
    ControlNetUse use;
    use.model = loader_->find(s.path, r->dtype);  // null until loaded: loadThen
    use.name = controlNetName(s.path).toStdString();
    use.scale = s.scale;
    use.guidance_start = s.start;
    use.guidance_end = s.end;
    use.images = {toImage8(image)};
    use.preprocessor = control_preprocessor_name(s.preprocessor);
    use.threshold_a = s.thresholds.low;
    use.threshold_b = s.thresholds.high;
    r->controlnets.push_back(std::move(use));
  }
  return true;
}

bool ControlNetPanel::modelsLoaded(const GenerationRequest& r) {
  return std::all_of(r.controlnets.begin(), r.controlnets.end(), [](const ControlNetUse& c) { return c.model != nullptr; });
}

void ControlNetPanel::loadThen(ComputeDType dtype, std::function<void()> then) {
  waiting_ = std::move(then);
  waiting_dtype_ = dtype;
  for (const QString& p : wantedPaths()) loader_->load(p, dtype);
  for (ControlNetUnitEditor* u : units_) refreshStatus(u);
  if (!loader_->isBusy()) onIdle();
}

void ControlNetPanel::onIdle() {
  if (!waiting_) return;
  auto then = std::exchange(waiting_, {});
  for (const QString& p : wantedPaths()) {
    const QString failure = loader_->failure(p, waiting_dtype_);
    if (!failure.isEmpty()) {
      emit errorOccurred(tr("Could not load the ControlNet %1:\n%2").arg(p, failure));
      return;
    }
  }
  QMetaObject::invokeMethod(this, then, Qt::QueuedConnection);
}

void ControlNetPanel::onLoaded(const QString& path) {
  rememberRecent(path);
  for (ControlNetUnitEditor* u : units_) refreshStatus(u);
}

void ControlNetPanel::onFailed(const QString&, const QString&) {
  for (ControlNetUnitEditor* u : units_) refreshStatus(u);
}

void ControlNetPanel::refreshStatus(ControlNetUnitEditor* u) {
  const QString p = u->modelPath();
  if (p.isEmpty())
    u->setModelStatus(tr("Choose a ControlNet folder or file."), false);
  else if (loader_->find(p, dtype_))
    u->setModelStatus(tr("%1: loaded (%2)").arg(controlNetName(p), dtypeText(dtype_)), false);
  else if (const QString failure = loader_->failure(p, dtype_); !failure.isEmpty())
    u->setModelStatus(failure, true);
  else if (loader_->isLoading(p, dtype_))
    u->setModelStatus(tr("%1: loading…").arg(controlNetName(p)), false);
  else
    u->setModelStatus(u->isOn() ? QString() : tr("off"), false);
}

QStringList ControlNetPanel::recentPaths() const {
  return QSettings().value(kRecentKey).toStringList();
}

void ControlNetPanel::rememberRecent(const QString& path) {
  QStringList recent = recentPaths();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  QSettings().setValue(kRecentKey, recent);
}

QString ControlNetPanel::findByName(const QString& name) const {
  QStringList candidates;
  for (const ControlNetUnitEditor* u : units_) candidates << u->modelPath();
  candidates << recentPaths();
  for (const QString& p : candidates)
    if (!p.isEmpty() && controlNetName(p) == name && QFileInfo::exists(p)) return p;
  return {};
}

void ControlNetPanel::restore(const std::vector<ImageMetadata::ControlNet>& controlnets, QStringList* notes) {
  int without_image = 0;
  const int n = std::min(static_cast<int>(controlnets.size()), kMaxUnits);
  for (int k = 0; k < n; ++k) {
    const ImageMetadata::ControlNet& c = controlnets[k];
    const QString name = QString::fromStdString(c.name);
    ControlNetUnitEditor* u = k < unitCount() ? unit(k) : addUnit();
    ControlNetUnitSettings s;
    s.path = controlNetName(u->modelPath()) == name ? u->modelPath() : findByName(name);
    if (s.path.isEmpty())
      *notes << tr("the ControlNet '%1' was not loaded recently: choose its folder or file in ControlNet %2")
                    .arg(name)
                    .arg(k + 1);
    try {
      s.preprocessor = parse_control_preprocessor(c.module);
    } catch (const std::exception&) {
      *notes << tr("ControlNet %1's preprocessor '%2' is not one Octodiff has (none is set)")
                    .arg(k + 1)
                    .arg(QString::fromStdString(c.module));
    }
    s.thresholds = {c.threshold_a, c.threshold_b};
    s.scale = c.weight;
    s.start = c.guidance_start;
    s.end = c.guidance_end;
    u->setSettings(s);
    if (!u->hasImage()) ++without_image;
  }
  if (static_cast<int>(controlnets.size()) > kMaxUnits)
    *notes << tr("only the first %1 of its %2 ControlNets are restored").arg(kMaxUnits).arg(controlnets.size());
  int switched_off = 0;
  for (int k = n; k < unitCount(); ++k)
    if (unit(k)->isOn()) {
      unit(k)->enabledBox()->setChecked(false);
      ++switched_off;
    }
  if (n > 0)
    *notes << (without_image ? tr("its control images are not in PNG metadata: open them under ControlNet")
                             : tr("its control images are not in PNG metadata: the ones under ControlNet are kept"));
  if (switched_off > 0) *notes << tr("%n ControlNet(s) switched off (it was made without them)", nullptr, switched_off);
}

}  // namespace octodiff::gui
