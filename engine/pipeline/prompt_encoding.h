// Stage 1 of every pipeline: prompts → token ids (on the host, as the Flax pipeline's
// prepare_inputs) → text embeddings per device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/clip_text_model.h"
#include "text/clip_tokenizer.h"

namespace octodiff {

// Token ids of every image's prompt and negative prompt (D·B each, device-major), padded to
// `length`, and the warnings for prompts that were truncated.
struct TokenizedPrompts {
  std::vector<std::vector<int32_t>> cond, uncond;
  int length = 0;
  std::vector<std::string> warnings;
};

// Throws octodiff::Error naming the prompt ("prompt 3: ...") a tokenizer cannot take.
TokenizedPrompts tokenize_prompts(const ClipTokenizer& tokenizer, const std::vector<std::string>& prompts,
                                  const std::vector<std::string>& negative_prompts);

// Device d's context for the UNet, (rows, length, hidden): with guidance the B negative
// prompts' embeddings then the B prompts' ([uncond; cond], rows = 2B), else the prompts' alone.
Tensor encode_device_prompts(const ClipTextModel& encoder, const TokenizedPrompts& tokens, int device, int batch,
                             bool guidance);

}  // namespace octodiff
