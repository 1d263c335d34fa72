// DecoderPanel: what decodes the final images — the model's VAE or a tiny autoencoder (TAESD) —
// and where the TAESD is (a diffusers AutoencoderTiny folder or madebyollin's
// taesd_decoder.safetensors; remembered by the window's settings). The window loads the TAESD
// beside the model (ModelLoadOptions::tiny_autoencoder) whenever the model is (re)loaded, so a
// new path reloads the model; previews use a loaded TAESD whatever the decoder choice.
#pragma once

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QWidget>

#include "pipeline/generation.h"

namespace octodiff::gui {

class DecoderPanel : public QWidget {
  Q_OBJECT
 public:
  explicit DecoderPanel(QWidget* parent = nullptr);

  Decoder decoder() const;
  void setDecoder(Decoder decoder);
  QString taesdPath() const { return path_->text().trimmed(); }
  void setTaesdPath(const QString& path) { path_->setText(path); }
  // What the loaded model has: a TAESD (its file or folder name) or none (`detail` says why).
  void showTaesdLoaded(bool loaded, const QString& detail);
  QString status() const { return status_->text(); }
  QComboBox* decoderBox() const { return decoder_; }

 signals:
  void taesdPathChosen(const QString& path);  // by the user: reload the model with it
  void decoderChanged();

 private:
  void browse(bool folder);

  QComboBox* decoder_;
  QLineEdit* path_;
  QLabel* status_;
};

}  // namespace octodiff::gui
