// tiny-sd's diffusers weights as the contents of a single-file (ldm) checkpoint
// (io/single_file.h's write_single_file), for the tests that write one.
// Header-only: its users link octodiff_io, as the support library does.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/single_file.h"
#include "test_support.h"

namespace octodiff::test {

// One tiny-sd component file's tensors, by diffusers name.
struct Component {
  std::shared_ptr<SafetensorsFile> file;
  std::map<std::string, Tensor> tensors;  // diffusers name -> values

  std::vector<DiffusersTensor> to_write(const std::string& skip = "") const {
    std::vector<DiffusersTensor> out;
    for (const auto& [name, t] : tensors) {
      if (name == skip) continue;
      const Tensor* tp = &t;
      out.push_back(
          {name, t.shape(), [tp](float* dst) { std::memcpy(dst, tp->data(), sizeof(float) * tp->numel()); }});
    }
    return out;
  }
};

inline Component load_component(const std::string& rel) {
  Component c;
  c.file = SafetensorsFile::open(test::tiny_sd_dir() / rel);
  for (const auto& rec : c.file->tensors())
    if (rec.name != "text_model.embeddings.position_ids") c.tensors[rec.name] = c.file->to_f32(rec);
  return c;
}

inline const Component& tiny_unet_weights() {
  static Component c = load_component("unet/diffusion_pytorch_model.safetensors");
  return c;
}
inline const Component& tiny_vae_weights() {
  static Component c = load_component("vae/diffusion_pytorch_model.safetensors");
  return c;
}
inline const Component& tiny_text_encoder_weights() {
  static Component c = load_component("text_encoder/model.safetensors");
  return c;
}

// tiny-sd's UNet, VAE and text encoder as `family`'s single-file contents.
inline SingleFileContents tiny_sd_single_file_contents(SingleFileCheckpoint::Family family) {
  SingleFileContents contents;
  contents.family = family;
  contents.unet = tiny_unet_weights().to_write();
  contents.vae = tiny_vae_weights().to_write();
  contents.text_encoder = tiny_text_encoder_weights().to_write();
  return contents;
}

}  // namespace octodiff::test
