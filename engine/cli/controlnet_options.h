// octodiff-cli generate's ControlNet options (pipeline/controlnet.h):
//   --controlnet PATH[:SCALE]   a ControlNet (diffusers folder or original .safetensors), repeatable
//   --control-image FILE.png    its control image, one per --controlnet, in the same order
//   --control-preprocess canny|none   what makes the control images from the files (default none)
//   --control-start F --control-end F control guidance window of every ControlNet (default 0, 1)
#pragma once

#include "args.h"
#include "pipeline/generation.h"

namespace octodiff::cli {

extern const char* kControlNetUsage;

// Loads the ControlNets (in req.dtype) and their images into req.controlnets. Errors name the
// option and the file.
void controlnet_options(const Args& args, GenerationRequest& req);

}  // namespace octodiff::cli
