#include "pipeline/single_file_model.h"

#include "core/error.h"
#include "io/single_file.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

// SD's scheduler configuration (the single-file converter's defaults), epsilon or v-prediction.
std::string sd_scheduler_json(bool v_prediction) {
  return std::string(R"({"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": false,
    "skip_prk_steps": true, "steps_offset": 1, "clip_sample": false, "prediction_type": ")") +
         (v_prediction ? "v_prediction" : "epsilon") + "\"}";
}

}  // namespace

SingleFileParts load_single_file_parts(const fs::path& file, const ModelLoadOptions& options) {
  SingleFileCheckpoint ckpt = open_single_file(file, options.use_ema);
  SingleFileParts parts;
  const bool sd2 = ckpt.family == SingleFileCheckpoint::Family::SD2;
  if (ckpt.unet_in_channels != 4 && ckpt.unet_in_channels != 9)
    fail("'", file.string(), "' has a UNet with ", ckpt.unet_in_channels,
         " input channels; Octodiff runs 4-channel models and 9-channel inpainting models");
  parts.description = cat(sd2 ? "SD 2.x" : "SD 1.x", ckpt.v_prediction ? " (v-prediction)" : "",
                          " single-file checkpoint", ckpt.used_ema ? ", EMA weights" : "");
  parts.text_config = sd2 ? ClipTextConfig::sd2() : ClipTextConfig::sd1();
  parts.unet_config = sd2 ? UNetConfig::sd2(ckpt.v_prediction) : UNetConfig::sd1();
  parts.unet_config.cross_attention_dim = ckpt.cross_attention_dim;
  parts.unet_config.in_channels = ckpt.unet_in_channels;  // 9: an inpainting model (pipeline/inpaint.h)
  parts.vae_config = VaeConfig::sd();
  parts.scheduler_json = sd_scheduler_json(ckpt.v_prediction);
  for (auto [src, what] : {std::pair{&ckpt.unet, "UNet"}, {&ckpt.vae, "VAE"}, {&ckpt.text_encoder, "text encoder"}})
    if (!*src)
      fail("'", file.string(), "' has no ", what, " weights; Octodiff needs a complete checkpoint "
           "(UNet, VAE and text encoder)");
  parts.text_encoder = ckpt.text_encoder;
  parts.unet = ckpt.unet;
  parts.vae = ckpt.vae;

  if (options.tokenizer_dir) {
    parts.tokenizer_dir = *options.tokenizer_dir;
  } else if (fs::exists(file.parent_path() / "tokenizer" / "vocab.json")) {
    parts.tokenizer_dir = file.parent_path() / "tokenizer";
  } else {
    fail("'", file.string(), "' is a single-file checkpoint, which carries no CLIP vocabulary. Give the "
         "tokenizer folder of a diffusers model of the same family (", sd2 ? "SD 2.x" : "SD 1.x",
         ") with --tokenizer DIR (a folder holding vocab.json and merges.txt), or put such a folder "
         "named 'tokenizer' next to the checkpoint");
  }
  return parts;
}

}  // namespace octodiff
