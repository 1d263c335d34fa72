// Inpainting: what differs from image-to-image (pipeline/image_to_image.h) and text-to-image.
//
// Two modes, chosen by the UNet's input channels (InpaintMode):
//
//  9 channels (an inpainting UNet) — FlaxStableDiffusionInpaintPipeline, and diffusers'
//  StableDiffusionInpaintPipeline under Compat::Diffusers:
//    mask ─ grey (PIL "L") ─ /255 ─ binarised (≥ 0.5 → 1) = M;  masked image = image · (M < 0.5)
//    masked-image latents = VAE posterior sample of the masked image × scaling_factor
//    latent mask = M resized to the latent size, nearest (Flax: jax.image.resize "nearest",
//      source index ⌊(i + ½)·H/h⌋; diffusers: torch interpolate "nearest", ⌊i·H/h⌋)
//    every UNet call: [scale_model_input(latents), latent mask, masked-image latents] (CFG: both
//      halves), only the 4 latent channels are stepped.
//    The Flax pipeline starts from pure noise (noise × init_noise_sigma) and has no strength;
//    diffusers does the same at strength 1 and starts from the noised image latents below 1. Octodiff
//    does that in both modes (at strength < 1 under Flax with the image-to-image start rule), so
//    strength 1 is exactly the Flax pipeline. (Two Flax details are not copied: in bf16 the Flax
//    inpaint pipeline draws its noise in bf16, Octodiff always in float32 as text-to-image; and it
//    guides at every scale, Octodiff at guidance ≤ 1 runs one pass as text-to-image does.)
//
//  4 channels (any ordinary UNet) — diffusers' legacy mode of StableDiffusionInpaintPipeline:
//    the image-to-image start (pure noise at strength 1, as diffusers), then after every step i
//      latents = (1 − m)·add_noise(image latents, noise, call i + 1) + m·latents
//    and after the last one (1 − m)·image latents + m·latents (m: the latent mask, binarised).
//    The Flax pipeline has no 4-channel mode: under Compat::Flax Octodiff uses the same rule with
//    the Flax mask preprocessing, scheduler semantics and random draws.
//
// Random draws of device d (key_d as text-to-image; Flax: masked-image latents are sampled with
// split(key_d)[1]):
//   noise:                normal(key_d, (B, C, h, w))         or GenerationRequest::latents
//   init image ε:         normal(key_d, (B, h, w, C)) (NHWC)   or GenerationRequest::posterior_noise
//   masked image ε:       normal(split(key_d)[1], (B, h, w, C)) or GenerationRequest::masked_posterior_noise
//
// Masks are the size of their init images before preprocessing, which resizes them as the image
// (Lanczos, each side floored to 32 under Flax, 8 under diffusers; the Flax pipeline resizes the
// mask with PIL's default bicubic filter: Octodiff uses Lanczos in both modes, which only moves
// binarised edges by rounding). Options beyond the two pipelines, as AUTOMATIC1111 has them:
//   mask_blur > 0: the grey mask is blurred (Gaussian, σ = mask_blur pixels, kernel
//     2·⌊2.5σ + 0.5⌋ + 1 taps, A1111's cv2.GaussianBlur, reflect-101 borders) before anything
//     else, and the result is pasted over the init image with the blurred mask as alpha (soft seam).
//   inpaint_only_masked: the bounding box of the mask's non-black pixels, plus
//     only_masked_padding, expanded to the image's aspect ratio (diffusers'
//     VaeImageProcessor.get_crop_region = A1111's crop) is cut from the init image and mask,
//     resized (Lanczos) to the generation size and inpainted there; the result is resized back
//     to the box and pasted over the init image with the (blurred) mask as alpha
//     (VaeImageProcessor.apply_overlay, in float32 instead of PIL's 8-bit premultiplied alpha).
// Masks that are entirely black after blur and binarisation are refused (nothing to repaint:
// use image-to-image); entirely white ones repaint everything (4 channels: exactly image-to-image).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"
#include "models/autoencoder_kl.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/generation.h"
#include "schedulers/scheduler.h"

namespace octodiff {

enum class InpaintMode {
  UNetChannels,  // a 9-channel inpainting UNet: [latents, mask, masked-image latents]
  LatentBlend,   // a 4-channel UNet: diffusers' legacy blend after every step
};
std::string inpaint_mode_name(InpaintMode mode);  // "9-channel unet", "latent blend"

// The mode for a UNet with `unet_in_channels` inputs and a VAE with `latent_channels`; throws
// octodiff::Error (diffusers' "Incorrect configuration settings!" reasoning) for any other count.
InpaintMode inpaint_mode_for(int unet_in_channels, int latent_channels);

// An 8-bit grey image, row-major (PIL mode "L").
struct GrayImage {
  int width = 0, height = 0;
  std::vector<uint8_t> values;
};

// PIL's convert("L") of an RGB image: (19595·R + 38470·G + 7471·B + 2^15) >> 16.
GrayImage to_gray(const Image8& rgb);
// The Gaussian blur of the "Mask blur" option (σ = radius pixels; 0 returns the mask). Throws for
// a negative radius.
GrayImage blur_mask(const GrayImage& mask, int radius);
// PIL's Lanczos resize of a grey image (io/image.h resize_lanczos on R = G = B).
GrayImage resize_gray(const GrayImage& mask, int width, int height);

// A box of pixels [x1, x2) × [y1, y2).
struct CropBox {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  int width() const { return x2 - x1; }
  int height() const { return y2 - y1; }
};
// diffusers' VaeImageProcessor.get_crop_region(mask, width, height, pad): the box of non-zero
// pixels grown by `pad`, then expanded to the aspect ratio width:height inside the mask.
CropBox mask_crop_region(const GrayImage& mask, int width, int height, int pad);

// One device's mask as resolve leaves it.
struct PreparedMask {
  GrayImage soft;   // the grey mask at the generation size (blurred; cropped in only-masked mode)
  Tensor binary;    // (H, W) float32: 1 where soft/255 ≥ 0.5 (repainted), else 0
  // Pasting the result back (mask_blur > 0 or only-masked), else empty: the init image as
  // preprocessed, the grey mask at its size (the alpha), and where the generation goes in it.
  Image8 paste_onto;
  GrayImage paste_alpha;
  CropBox box;      // the whole image unless only-masked
};

// What resolve keeps for an inpainting run (ResolvedRequest::inpaint).
struct InpaintInputs {
  bool active = false;
  InpaintMode mode = InpaintMode::UNetChannels;
  std::vector<PreparedMask> masks;  // 1 for every device, or D
  const PreparedMask& mask_for(int device) const { return masks.size() == 1 ? masks[0] : masks.at(device); }
};

// Checks the request's masks against its init images (count, size, blur, all-black) and prepares
// them; in only-masked mode also replaces `init_images` (as preprocessed) by the crops, resized
// to their size. `originals`: the request's init images before preprocessing. Throws
// octodiff::Error naming the mask.
InpaintInputs resolve_inpaint(const GenerationRequest& request, const std::vector<Image8>& originals,
                              std::vector<Image8>& init_images, int devices, InpaintMode mode);

// Only-masked mode: every ControlNet's control images (already at the generation size) cut to
// the masks' boxes and resized back (Lanczos), as the init images are — diffusers'
// StableDiffusionControlNetInpaintPipeline crops them with the same crops_coords. One image per
// device unless both the images and the masks are one for all.
void crop_control_images(std::vector<ControlNetUse>& controlnets, const InpaintInputs& inpaint, int devices);

// The latent mask (h, w) of a binarised (H, W) mask: nearest, by the `compat` pipeline's rule.
Tensor latent_mask(const Tensor& binary, int h, int w, Compat compat);
// The masked images (B, 3, H, W): images · (mask < 0.5).
Tensor masked_images(const Tensor& images, const Tensor& binary);

// One device's inputs to its inpainting start.
struct InpaintStartInputs {
  const AutoencoderKL* vae = nullptr;
  const Scheduler* scheduler = nullptr;
  const SchedulerState* state = nullptr;  // the plan's (set_timesteps_for_strength)
  Compat compat = Compat::Flax;
  double strength = 1;
  InpaintMode mode = InpaintMode::UNetChannels;
  Tensor images;      // (B, 3, H, W) in [-1, 1]: device_init_images
  Tensor noise;       // (B, C, h, w)
  Tensor image_eps;   // (B, C, h, w): ε of the init images' posterior sample
  Tensor masked_eps;  // (B, C, h, w): ε of the masked images' posterior sample (9 channels)
  const PreparedMask* mask = nullptr;
};

// What one device's loop adds (DenoiseHooks), NHWC.
struct InpaintDevice {
  InpaintMode mode = InpaintMode::UNetChannels;
  Tensor extra_channels;  // 9 channels: (B, h, w, 1 + C) = [latent mask, masked-image latents]
  Tensor image_latents;   // blend: (B, h, w, C)
  Tensor noise;           // blend: (B, h, w, C)
  Tensor mask;            // (h, w) latent mask
};

// The sample the loop starts from (B, h, w, C) into *start, and the device's hook data.
InpaintDevice start_inpaint_device(const InpaintStartInputs& in, Tensor* start);

// The hooks of a device's loop: the extra channels (9) or the blend after each step (4) with
// `scheduler`'s add_noise at the next call of `state`, image latents alone after call calls − 1.
DenoiseHooks inpaint_hooks(const InpaintDevice& device, const Scheduler& scheduler, const SchedulerState& state,
                           int calls);

// Pastes a device's decoded images (B, H, W, 3) in [0, 1] over its init image when the mask asks
// for it (blur or only-masked; otherwise leaves them): the generation resized to the box
// (Lanczos, 8 bits), out = init·(1 − a) + generation·a with a = alpha/255.
void paste_inpainted(Tensor& images, const PreparedMask& mask);

}  // namespace octodiff
