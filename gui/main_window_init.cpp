// MainWindow's image-to-image part: "Vary" on a result, the init image opened or dropped, the
// mask painted in the Mask tab (InitImagePanel and its MaskEditor), a seed comparison of one init
// image, and what reusing an image or reopening a PNG restores of all that. Split from
// main_window.cpp, which holds the layout and the run wiring.
#include <QFileDialog>
#include <QFileInfo>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>

#include "image_metadata_io.h"
#include "main_window.h"

namespace octodiff::gui {
namespace {

// The panel's options persist between sessions beside AppSettings' keys (the image does not).
void restorePanelOptions(InitImagePanel* panel) {
  const QSettings s(QStringLiteral("Octodiff"), QStringLiteral("Octodiff"));
  InitImageSettings o;
  o.strength = s.value("image_to_image/strength", InitImagePanel::kDefaultStrength).toDouble();
  o.mask_blur = s.value("image_to_image/mask_blur", InitImagePanel::kDefaultMaskBlur).toInt();
  o.only_masked = s.value("image_to_image/only_masked", false).toBool();
  o.masked_padding = s.value("image_to_image/masked_padding", 32).toInt();
  panel->setSettings(o);
  panel->setMode(static_cast<VaryMode>(s.value("image_to_image/mode", 0).toInt()));
  panel->setVariations(s.value("image_to_image/variations", InitImagePanel::kDefaultVariations).toInt());
}

void savePanelOptions(const InitImagePanel* panel) {
  QSettings s(QStringLiteral("Octodiff"), QStringLiteral("Octodiff"));
  const InitImageSettings o = panel->settings();
  s.setValue("image_to_image/strength", *o.strength);
  s.setValue("image_to_image/mask_blur", *o.mask_blur);
  s.setValue("image_to_image/only_masked", *o.only_masked);
  s.setValue("image_to_image/masked_padding", *o.masked_padding);
  s.setValue("image_to_image/mode", static_cast<int>(panel->mode()));
  s.setValue("image_to_image/variations", panel->variations());
}

}  // namespace

void MainWindow::buildInitPanel() {
  init_panel_ = new InitImagePanel;
  restorePanelOptions(init_panel_);
  connect(init_panel_, &InitImagePanel::errorOccurred, this, &MainWindow::reportError);
  connect(init_panel_, &InitImagePanel::openRequested, this, &MainWindow::openInitImageDialog);
  connect(init_panel_, &InitImagePanel::maskEditRequested, this,
          [this] { tabs_->setCurrentWidget(init_panel_->maskEditor()); });
  connect(init_panel_, &InitImagePanel::changed, this, [this] {
    savePanelOptions(init_panel_);
    if (live_) live_->inputsChanged();  // live mode varies the image as the strength or mask changes
  });
  connect(init_panel_, &InitImagePanel::initImageChanged, this, [this] {
    if (init_panel_->hasInitImage())
      statusBar()->showMessage(
          tr("Init image: %1 — Generate varies it (image to image)").arg(init_panel_->origin()), 8000);
    else
      statusBar()->showMessage(tr("No init image: Generate makes images from text"), 5000);
  });
}

void MainWindow::vary(const RunPtr& run, int index) {
  if (!run || index < 0 || index >= run->imageCount()) return;
  const int B = run->batch();
  const ImageMetadata m = describe_image(run->request, run->result, *run->model, index / B, index % B);
  QStringList notes;
  restoreLorasAndDecoder(m, &notes);
  restoreControlNets(m, &notes);
  FormState form = formFromMetadata(m, formState(), &notes);
  form.seed_locked = settings_panel_->seedLocked();  // Vary keeps the user's seed habit
  form.request.devices = 0;                          // the variations count (or the prompts) sets it
  const QString origin = tr("image %1 of run #%2").arg(index + 1).arg(run->number);
  init_panel_->setInitImage(run->images[index], origin);
  applyRestoredForm(form, notes, origin);
  showInitPanel();
  statusBar()->showMessage(tr("Vary %1: set the strength and press Generate").arg(origin), 10000);
}

void MainWindow::showInitPanel() {
  // Queued: the panel has just grown (its options appear with an image) and is laid out first.
  QMetaObject::invokeMethod(
      this,
      [this] {
        if (auto* scroll = findChild<QScrollArea*>(QStringLiteral("formScroll")))
          scroll->ensureWidgetVisible(init_panel_, 0, 0);
      },
      Qt::QueuedConnection);
}

void MainWindow::dropFile(const QString& path) {
  // An Octodiff (or A1111) PNG restores its settings, as it always did; any other image file — a
  // PNG without settings included — becomes the init image.
  if (path.endsWith(QStringLiteral(".png"), Qt::CaseInsensitive)) {
    try {
      static_cast<void>(octodiff::gui::importPng(path));
      importPng(path);
      return;
    } catch (const std::exception&) {
      // No settings (or not a PNG): try it as an image below; its error names the file.
    }
  }
  if (init_panel_->openFile(path)) showInitPanel();
}

void MainWindow::openInitImageDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open an init image"), settings_.lastFolder(),
      tr("Images (*.png *.jpg *.jpeg *.bmp *.webp *.gif *.tif *.tiff *.ppm);;All files (*)"));
  if (path.isEmpty()) return;
  settings_.setLastFolder(QFileInfo(path).absolutePath());
  if (init_panel_->openFile(path)) showInitPanel();
}

bool MainWindow::runInitSeedComparison() {
  QString error;
  const auto seeds = SeedComparisonView::parseSeeds(comparison_->seedsText(), &error);
  if (!seeds) {
    reportError(
        tr("A seed comparison of the init image needs its seeds (the Seed comparison tab): %1").arg(error));
    return false;
  }
  comparison_->setMode(JobKind::SeedSweep);
  return runSeedComparison(JobKind::SeedSweep, *seeds);
}

void MainWindow::restoreInitFromRun(const RunRecord& run, int index, QStringList* notes) {
  const GenerationRequest& r = run.request;
  if (r.init_images.empty()) {
    if (init_panel_->hasInitImage()) {
      init_panel_->clearInitImage();
      *notes << tr("the init image was removed (that image was made from text alone)");
    }
    return;
  }
  // One init image (and mask) for every device, or one per device.
  const size_t d = static_cast<size_t>(index / std::max(1, run.batch()));
  init_panel_->setInitImage(toQImage(r.init_images.size() > 1 ? r.init_images.at(d) : r.init_images[0]),
                            tr("the init image of run #%1").arg(run.number));
  if (!r.masks.empty())
    init_panel_->maskEditor()->setMask(toQImage(r.masks.size() > 1 ? r.masks.at(d) : r.masks[0]));
  init_panel_->setSettings(initSettingsFromRequest(r));
}

void MainWindow::restoreInitFromPng(const InitImageSettings& s, QStringList* notes) {
  if (!s.imageToImage()) {
    if (init_panel_->hasInitImage()) {
      init_panel_->clearInitImage();
      *notes << tr("the init image was removed (that image was made from text alone)");
    }
    return;
  }
  init_panel_->setSettings(s);
  const QString strength = QString::number(*s.strength, 'g', 3);
  if (init_panel_->hasInitImage())
    *notes << tr("it was made from an init image, which PNG metadata does not carry: the one under Image to "
                 "image is kept (strength %1)")
                  .arg(strength);
  else
    *notes << tr("it was made from an init image, which PNG metadata does not carry: open or drop that image "
                 "(strength %1 is set)")
                  .arg(strength);
  if (s.mask_blur) *notes << tr("nor its mask: paint it again in the Mask tab");
}

}  // namespace octodiff::gui
