// A GenerationResult as bytes for another process: a JSON header (everything but the tensors)
// and the three float tensors, sent as they are (bit-exact).
#pragma once

#include <string>

#include "pipeline/generation.h"

namespace octodiff {

std::string result_header_json(const GenerationResult& result);

// The tensors' shapes, as the header names them: images, initial_latents, final_latents.
struct ResultShapes {
  Shape images, initial_latents, final_latents;
};
ResultShapes result_header_shapes(const std::string& header_json);

// The result from its header and its tensors (of the header's shapes).
GenerationResult result_from_header(const std::string& header_json, Tensor images, Tensor initial_latents,
                                    Tensor final_latents);

}  // namespace octodiff
