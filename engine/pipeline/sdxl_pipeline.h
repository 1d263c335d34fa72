// What the sharded pipeline does differently for an SDXL model (StableDiffusionModel::is_sdxl()):
// which requests it takes, and its prompts' tokens (pipeline/sdxl_prompt_encoding.h).
//
// Image-to-image and inpainting run the SD stages (pipeline/image_to_image.h, inpaint.h) with
// SDXL's conditioning, as diffusers' StableDiffusionXLImg2ImgPipeline / StableDiffusionXLInpaintPipeline
// do under Compat::Diffusers: the time ids take the init image's (preprocessed) size, i.e. the
// generation size, as (h, w, 0, 0, h, w) unless original size / crop / target size are given;
// no aesthetic score (requires_aesthetics_score False, as for base models: the refiner, whose UNet
// takes 5 time ids, is not supported); 4-channel UNets with diffusers' legacy blend, 9-channel
// SDXL inpainting UNets with [latents, mask, masked-image latents]. Under Compat::Flax (there is
// no Flax SDXL img2img or inpaint pipeline) the SD 1.x Flax rules apply with the Flax SDXL
// conditioning: sides floored to 32, the device key for both the noise and the posterior ε, the
// start step t_start, (h, w, 0, 0, h, w).
#pragma once

#include "pipeline/generation.h"
#include "pipeline/model.h"
#include "pipeline/sdxl_prompt_encoding.h"

namespace octodiff {

// Throws octodiff::Error for size
// conditioning outside its place (a non-SDXL model, or Compat::Flax).
void check_sdxl_request(const StableDiffusionModel& model, const GenerationRequest& request);

// Whether an empty negative prompt means zero negative embeddings: always under Compat::Flax
// (the Flax pipeline without neg_prompt_ids), the folder's force_zeros_for_empty_prompt under
// Compat::Diffusers.
bool sdxl_zeros_for_empty_negative(const StableDiffusionModel& model, Compat compat);

}  // namespace octodiff
