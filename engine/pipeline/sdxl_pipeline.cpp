#include "pipeline/sdxl_pipeline.h"

#include "core/error.h"

namespace octodiff {

void check_sdxl_request(const StableDiffusionModel& m, const GenerationRequest& req) {
  if (!m.is_sdxl()) {
    if (req.sdxl_size.given())
      fail("original size, crop and target size condition SDXL models only; '", m.display_name(), "' is not one");
    return;
  }
  (void)sdxl_time_ids(req.sdxl_size, 1, 1);  // refuses negative values
  if (req.sdxl_size.given() && req.compat != Compat::Diffusers)
    fail("original size, crop and target size are diffusers' SDXL options (--compat diffusers); the Flax SDXL "
         "pipeline always conditions on (height, width, 0, 0, height, width)");
}

bool sdxl_zeros_for_empty_negative(const StableDiffusionModel& m, Compat compat) {
  return compat == Compat::Flax || m.force_zeros_for_empty_prompt();
}

}  // namespace octodiff
