// What the sharded pipeline does differently for an SDXL model (StableDiffusionModel::is_sdxl()):
// which requests it takes, and its prompts' tokens (pipeline/sdxl_prompt_encoding.h).
#pragma once

#include "pipeline/generation.h"
#include "pipeline/model.h"
#include "pipeline/sdxl_prompt_encoding.h"

namespace octodiff {

// Throws octodiff::Error for what SDXL does not support yet (image-to-image, inpainting,
// ControlNet) and for size
// conditioning outside its place (a non-SDXL model, or Compat::Flax).
void check_sdxl_request(const StableDiffusionModel& model, const GenerationRequest& request);

// Whether an empty negative prompt means zero negative embeddings: always under Compat::Flax
// (the Flax pipeline without neg_prompt_ids), the folder's force_zeros_for_empty_prompt under
// Compat::Diffusers.
bool sdxl_zeros_for_empty_negative(const StableDiffusionModel& model, Compat compat);

}  // namespace octodiff
