#include "pipeline/single_file_model.h"

#include "core/error.h"
#include "io/single_file.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

const char* prediction_name(bool v_prediction) {
  return v_prediction ? "v_prediction" : "epsilon";
}

// SD's scheduler configuration (the single-file converter's defaults), epsilon or v-prediction.
std::string sd_scheduler_json(bool v_prediction) {
  return cat(R"({"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": false,
    "skip_prk_steps": true, "steps_offset": 1, "clip_sample": false, "prediction_type": ")",
             prediction_name(v_prediction), "\"}");
}

// stable-diffusion-xl-base-1.0's scheduler: Euler, leading timesteps, offset 1.
std::string sdxl_scheduler_json(bool v_prediction) {
  return cat(R"({"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085,
    "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "steps_offset": 1,
    "timestep_spacing": "leading", "interpolation_type": "linear", "use_karras_sigmas": false,
    "prediction_type": ")",
             prediction_name(v_prediction), "\"}");
}

// A zero-terminal-SNR checkpoint's (`ztsnr` marker): PNDM has no such schedule, so Euler with it
// and trailing timesteps (the paper's and diffusers' recommendation), the same SD betas.
std::string zero_snr_scheduler_json(bool v_prediction) {
  return cat(R"({"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085, "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "steps_offset": 1,
    "timestep_spacing": "trailing", "rescale_betas_zero_snr": true, "prediction_type": ")",
             prediction_name(v_prediction), "\"}");
}

// SDXL's configurations and second tower; the tokenizers are found by the caller.
void sdxl_parts(const SingleFileCheckpoint& ckpt, SingleFileParts& parts) {
  parts.description = cat("SDXL", ckpt.v_prediction ? " (v-prediction)" : "", " single-file checkpoint",
                          ckpt.used_ema ? ", EMA weights" : "");
  parts.text_config = ClipTextConfig::sd1();
  parts.text_2_config = ClipTextConfig::sdxl_bigg();
  parts.unet_config = UNetConfig::sdxl();
  parts.unet_config.in_channels = ckpt.unet_in_channels;
  parts.vae_config = VaeConfig::sdxl();
  parts.scheduler_json = sdxl_scheduler_json(ckpt.v_prediction);
  parts.text_encoder_2 = ckpt.text_encoder_2;
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
  const bool sdxl = ckpt.family == SingleFileCheckpoint::Family::SDXL;
  if (sdxl) sdxl_parts(ckpt, parts);
  if (ckpt.zero_snr) {
    parts.scheduler_json = zero_snr_scheduler_json(ckpt.v_prediction);
    parts.description += ", zero terminal SNR";
  }
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
         "tokenizer folder of a diffusers model of the same family (", sdxl ? "SDXL" : sd2 ? "SD 2.x" : "SD 1.x",
         ") with --tokenizer DIR (a folder holding vocab.json and merges.txt), or put such a folder "
         "named 'tokenizer' next to the checkpoint");
  }
  if (sdxl) {
    parts.tokenizer_2_dir = parts.tokenizer_dir.parent_path() / "tokenizer_2";
    if (!fs::exists(parts.tokenizer_2_dir / "vocab.json"))
      fail("'", file.string(), "' is an SDXL checkpoint, whose second text encoder needs its own tokenizer "
           "(SDXL pads with \"!\"): put an SDXL diffusers model's tokenizer_2 folder next to '",
           parts.tokenizer_dir.string(), "' (expected '", parts.tokenizer_2_dir.string(), "')");
  }
  return parts;
}

}  // namespace octodiff
