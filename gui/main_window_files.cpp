// MainWindow's menus, file and clipboard actions: export PNGs, import settings from PNGs (open or
// drop), copy, reuse, enlarge. Split from main_window.cpp, which holds the layout and the run wiring.
#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMimeData>
#include <QStatusBar>

#include "image_metadata_io.h"
#include "main_window.h"
#include "pipeline/metadata.h"

namespace octodiff::gui {
namespace {

QString firstLocalFile(const QMimeData* mime) {
  if (!mime || !mime->hasUrls()) return {};
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile()) return url.toLocalFile();
  return {};
}

}  // namespace

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open PNG settings…"), QKeySequence::Open, this, &MainWindow::openPngDialog);
  file->addAction(tr("Open &init image…"), this, &MainWindow::openInitImageDialog);
  file->addAction(tr("&Load model…"), this, &MainWindow::loadModelDialog);
  file->addSeparator();
  file->addAction(tr("&Save grid as PNG…"), QKeySequence::Save, this, [this] { saveGridDialog(last_run_); });
  file->addAction(tr("Save &all images…"), this, &MainWindow::saveAllDialog);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("&Generate"), QKeySequence(Qt::CTRL | Qt::Key_Return), this, &MainWindow::generate);
  run->addAction(tr("&Cancel"), QKeySequence(Qt::Key_Escape), this, &MainWindow::cancel);
  run->addAction(tr("Compare &seeds"), this, [this] {
    tabs_->setCurrentWidget(comparison_);
    comparison_->runButton()->click();
  });
}

bool MainWindow::exportGrid(const QString& path, RunPtr run) {
  if (!run) run = last_run_;
  if (!run) {
    reportError(tr("Nothing to save yet: generate images first."));
    return false;
  }
  try {
    if (run->imageCount() == 1)
      saveImagePng(path, *run, 0);
    else
      saveGridPng(path, *run);
    statusBar()->showMessage(tr("Saved %1").arg(path), 8000);
    return true;
  } catch (const std::exception& e) {
    reportError(tr("Could not save %1:\n%2").arg(path, QString::fromStdString(e.what())));
    return false;
  }
}

bool MainWindow::exportImage(const RunPtr& run, int index, const QString& path) {
  if (!run) return false;
  try {
    saveImagePng(path, *run, index);
    statusBar()->showMessage(tr("Saved %1").arg(path), 8000);
    return true;
  } catch (const std::exception& e) {
    reportError(tr("Could not save %1:\n%2").arg(path, QString::fromStdString(e.what())));
    return false;
  }
}

bool MainWindow::exportAllImages(const QString& dir) {
  if (!last_run_) {
    reportError(tr("Nothing to save yet: generate images first."));
    return false;
  }
  try {
    const QStringList paths = saveImagePngs(dir, *last_run_);
    statusBar()->showMessage(tr("Saved %1 images to %2").arg(paths.size()).arg(dir), 8000);
    return true;
  } catch (const std::exception& e) {
    reportError(tr("Could not save the images to %1:\n%2").arg(dir, QString::fromStdString(e.what())));
    return false;
  }
}

bool MainWindow::importPng(const QString& path) {
  try {
    const ImportedPng imported = octodiff::gui::importPng(path);
    QStringList notes;
    const FormState form = formFromMetadata(imported.metadata, formState(), &notes);
    const ModelPtr model = controller_->model();
    const QString made_with = QString::fromStdString(imported.metadata.model_name);
    if (model && !made_with.isEmpty() && made_with != QString::fromStdString(model->display_name()))
      notes << tr("it was made with the model '%1'; '%2' is loaded")
                   .arg(made_with, QString::fromStdString(model->display_name()));
    restoreLorasAndDecoder(imported.metadata, &notes);
    restoreInitFromPng(imported.init, &notes);
    restoreControlNets(imported.metadata, &notes);
    applyRestoredForm(form, notes, QFileInfo(path).fileName());
    return true;
  } catch (const std::exception& e) {
    reportError(tr("Could not restore settings from %1:\n%2").arg(path, QString::fromStdString(e.what())));
    return false;
  }
}

void MainWindow::reuseSettings(const RunPtr& run, int index) {
  if (!run || index < 0 || index >= run->imageCount()) return;
  const int B = run->batch();
  const ImageMetadata m = describe_image(run->request, run->result, *run->model, index / B, index % B);
  QStringList notes;
  restoreLorasAndDecoder(m, &notes);
  restoreInitFromRun(*run, index, &notes);
  restoreControlNets(m, &notes);
  applyRestoredForm(formFromMetadata(m, formState(), &notes), notes,
                    tr("image %1 of run #%2").arg(index + 1).arg(run->number));
}

void MainWindow::applyRestoredForm(const FormState& form, const QStringList& notes, const QString& origin) {
  setFormState(form);
  saveSettings();
  if (notes.isEmpty())
    banner_->dismiss();
  else
    banner_->showNote(tr("Settings restored from %1, but %2.").arg(origin, notes.join(QStringLiteral("; "))));
  statusBar()->showMessage(tr("Settings restored from %1").arg(origin), 8000);
  emit settingsRestored();
}

void MainWindow::copyImage(const RunPtr& run, int index) {
  if (!run || index < 0 || index >= run->imageCount()) return;
  auto* mime = new QMimeData;
  mime->setImageData(run->images[index]);
  try {
    // The PNG bytes too, with the metadata, for programs that paste files.
    mime->setData(QStringLiteral("image/png"), imagePngBytes(*run, index));
  } catch (const std::exception&) {
    // The plain image is still on the clipboard.
  }
  QApplication::clipboard()->setMimeData(mime);
  statusBar()->showMessage(tr("Copied image %1 to the clipboard").arg(index + 1), 5000);
}

ImageDialog* MainWindow::enlarge(const RunPtr& run, int index) {
  if (!run || index < 0 || index >= run->imageCount()) return nullptr;
  auto* dialog = new ImageDialog(run, index, this);
  connect(dialog, &ImageDialog::saveRequested, this, &MainWindow::saveImageDialog);
  connect(dialog, &ImageDialog::copyRequested, this, &MainWindow::copyImage);
  connect(dialog, &ImageDialog::reuseRequested, this, &MainWindow::reuseSettings);
  connect(dialog, &ImageDialog::varyRequested, this, &MainWindow::vary);
  dialog->show();
  return dialog;
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!firstLocalFile(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QString path = firstLocalFile(event->mimeData());
  if (path.isEmpty()) return;
  event->acceptProposedAction();
  dropFile(path);
}

void MainWindow::saveGridDialog(const RunPtr& run) {
  const RunPtr r = run ? run : last_run_;
  if (!r) return reportError(tr("Nothing to save yet: generate images first."));
  const QString path = QFileDialog::getSaveFileName(this, tr("Save grid as PNG"),
                                                    settings_.lastFolder() + "/" + suggestedGridName(*r),
                                                    tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  settings_.setLastFolder(QFileInfo(path).absolutePath());
  exportGrid(path, r);
}

void MainWindow::saveImageDialog(const RunPtr& run, int index) {
  if (!run) return;
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Save image as PNG"), settings_.lastFolder() + "/" + suggestedImageName(*run, index),
      tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  settings_.setLastFolder(QFileInfo(path).absolutePath());
  exportImage(run, index, path);
}

void MainWindow::saveAllDialog() {
  if (!last_run_) return reportError(tr("Nothing to save yet: generate images first."));
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Folder for the images"), settings_.lastFolder());
  if (dir.isEmpty()) return;
  settings_.setLastFolder(dir);
  exportAllImages(dir);
}

void MainWindow::openPngDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Restore settings from a PNG made by Octodiff"),
                                                    settings_.lastFolder(), tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  settings_.setLastFolder(QFileInfo(path).absolutePath());
  importPng(path);
}

void MainWindow::loadModelDialog() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Diffusers model folder"), settings_.lastFolder());
  if (dir.isEmpty()) return;
  model_chooser_->setPath(dir);
  loadModel(dir, QString());
}

}  // namespace octodiff::gui
