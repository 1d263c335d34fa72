// ControlNet: FlaxStableDiffusionControlNetPipeline (spec flax-family.md §1) and, under
// Compat::Diffusers, torch's StableDiffusionControlNetPipeline (guess mode off), as a hook of the
// shared denoising loop (DenoiseSetup::residuals). Everything else is text-to-image's. On an SDXL
// model the same hook is StableDiffusionXLControlNetPipeline (guess mode off): SDXL ControlNets
// (text_time) take the UNet's pooled text embeddings and time ids too, and the rules below
// (image preparation, sizes, keep) are the same in both diffusers pipelines:
//
//   control image ─ RGB ─ resized (Lanczos) to the generation size ─ x/255 → [0, 1], NHWC
//   every call i of the run: for each ControlNet k with keep_k(i) = 1 (below)
//       residuals_k = controlnet_k(model input, t, context, image (twice with CFG), scale_k)
//   the UNet adds Σ_k residuals_k (MultiControlNetModel's sum, in order) to its skips and mid block
//
//   keep_k(i) = 1 − [i/n < start_k or (i+1)/n > end_k], n = the calls run (diffusers'
//   controlnet_keep); a ControlNet with keep 0 is not run (diffusers runs it and scales by 0).
//
// Sizes: the images set the size when the request leaves it 0 — sides floored to a multiple of
// 64 (the Flax pipeline's preprocess) or of the VAE scale (diffusers' VaeImageProcessor) —
// then every image is resized to it; the ControlNet's conditioning embedding must bring the
// image to the latent size (its image_scale() = the VAE's scale). The Flax pipeline has no
// start/end and one ControlNet: with defaults (0, 1) and one ControlNet it is exactly that.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/controlnet.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/generation.h"

namespace octodiff {

// A ControlNet from (a) a diffusers folder (config.json + diffusion_pytorch_model.safetensors,
// or its fp16 variant) or (b) a single file in the original layout (`control_model.*` keys,
// io/single_file.h), whose configuration is read from the tensor shapes (heads: 64 channels
// each when cross_attention_dim is 1024 (SD 2.x), else 8, as SD 1.x). Weights packed in `dtype`
// on the heap. Errors name the file (and the tensor).
std::shared_ptr<const ControlNetModel> load_controlnet(const std::filesystem::path& path, ComputeDType dtype);

// The configuration a ControlNet's diffusers-named weights imply (for single files).
ControlNetConfig controlnet_config_from_weights(const WeightSource& w, const std::string& what);

// Checks req.controlnets against the UNet, the devices and the dtype and replaces each one's
// images by the prepared ones (all W × H); sets *height/*width from the first image when 0.
void resolve_controlnets(GenerationRequest& req, const UNetConfig& unet, int vae_scale_factor, int devices,
                         int* height, int* width);

// diffusers' controlnet_keep for call `i` of `n` run: 1 inside [start, end], else 0.
double controlnet_keep(int i, int n, double start, double end);

// Device d's images as the ControlNet takes them: B × H × W × 3 in [0, 1], twice ([x; x]) when
// `guided`.
Tensor device_control_images(const std::vector<Image8>& images, int device, int batch, bool guided);

// The residual provider of device d (DenoiseSetup::residuals): the resolved request's
// ControlNets on calls first_call … calls − 1. Null when the request has none. `text_time`: an
// SDXL run's pooled embeddings and time ids, rows like the context's (the UNet's own: diffusers'
// StableDiffusionXLControlNetPipeline gives the ControlNets the UNet's added_cond_kwargs); it
// must outlive the provider. Null for SD 1.x/2.x.
ResidualProvider controlnet_residuals(const std::vector<ControlNetUse>& uses, int device, int batch, bool guided,
                                      int first_call, int calls, const Numerics& numerics,
                                      const UNetTextTime* text_time = nullptr);

}  // namespace octodiff
