#include "decoder_panel.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QPushButton>

namespace octodiff::gui {

DecoderPanel::DecoderPanel(QWidget* parent) : QWidget(parent) {
  decoder_ = new QComboBox;
  decoder_->setObjectName(QStringLiteral("decoder"));
  decoder_->addItem(tr("VAE (the model's)"), static_cast<int>(Decoder::Vae));
  decoder_->addItem(tr("TAESD (tiny, ~18× faster)"), static_cast<int>(Decoder::Tiny));
  decoder_->setToolTip(tr("TAESD decodes far faster and fudges fine details; previews use it whenever one is "
                          "loaded."));
  connect(decoder_, &QComboBox::currentIndexChanged, this, &DecoderPanel::decoderChanged);

  path_ = new QLineEdit;
  path_->setObjectName(QStringLiteral("taesdPath"));
  path_->setPlaceholderText(tr("TAESD folder or taesd_decoder.safetensors"));
  connect(path_, &QLineEdit::editingFinished, this, [this] {
    if (path_->isModified()) emit taesdPathChosen(taesdPath());
    path_->setModified(false);
  });
  auto* folder = new QPushButton(tr("Folder…"));
  auto* file = new QPushButton(tr("File…"));
  connect(folder, &QPushButton::clicked, this, [this] { browse(true); });
  connect(file, &QPushButton::clicked, this, [this] { browse(false); });
  auto* path_row = new QHBoxLayout;
  path_row->addWidget(path_, 1);
  path_row->addWidget(folder);
  path_row->addWidget(file);

  status_ = new QLabel(tr("No TAESD loaded: previews use a linear latent→RGB map."));
  status_->setObjectName(QStringLiteral("taesdStatus"));
  status_->setWordWrap(true);
  auto* form = new QFormLayout(this);
  form->setContentsMargins(0, 0, 0, 0);
  form->setVerticalSpacing(4);
  form->addRow(tr("Decoder"), decoder_);
  form->addRow(tr("TAESD"), path_row);
  form->addRow(status_);
}

Decoder DecoderPanel::decoder() const {
  return static_cast<Decoder>(decoder_->currentData().toInt());
}

void DecoderPanel::setDecoder(Decoder d) {
  decoder_->setCurrentIndex(std::max(0, decoder_->findData(static_cast<int>(d))));
}

void DecoderPanel::showTaesdLoaded(bool loaded, const QString& detail) {
  status_->setText(loaded ? tr("TAESD loaded: %1 (previews use it)").arg(detail)
                          : tr("No TAESD loaded%1: previews use a linear latent→RGB map.")
                                .arg(detail.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(detail)));
}

void DecoderPanel::browse(bool folder) {
  const QString start = taesdPath().isEmpty() ? QString() : QFileInfo(taesdPath()).absolutePath();
  const QString chosen =
      folder ? QFileDialog::getExistingDirectory(this, tr("TAESD folder"), start)
             : QFileDialog::getOpenFileName(this, tr("TAESD decoder"), start, tr("safetensors (*.safetensors)"));
  if (chosen.isEmpty()) return;
  path_->setText(chosen);
  emit taesdPathChosen(chosen);
}

}  // namespace octodiff::gui
