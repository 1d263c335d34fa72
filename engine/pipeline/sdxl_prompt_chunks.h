// SDXL prompts as AUTOMATIC1111 reads them (modules/sd_hijack_clip.py with
// FrozenCLIPEmbedderForSDXLWithCustomWords for the first tower and
// FrozenOpenCLIPEmbedder2WithCustomWords for the second): the emphasis syntax, 75-token chunks
// and textual-inversion embeddings of pipeline/prompt_chunks.h, tower by tower.
//
//   Each tower lays a prompt out with its own tokenizer (the same chunks in both: SDXL's two
//   tokenizers share CLIP's vocabulary and differ only in the padding token; an embedding has as
//   many clip_l as clip_g vectors). Every 77-token chunk goes through both towers on its own.
//   The weights scale each tower's penultimate hidden states (what SDXL's context is) with the
//   mean restored per chunk and per tower — A1111's "Original" emphasis, applied in A1111 by each
//   of SDXL's two embedders to its own output before the conditioner concatenates them:
//       context chunk c = restore(z1_c · w) ‖ restore(z2_c · w)          (77 × (hidden_1 + hidden_2))
//   and the chunks are concatenated along the sequence (77·k tokens).
//   text_embeds (the pooled condition) = tower 2's projected EOS of the first chunk, unweighted
//   (A1111 keeps zs[0].pooled, computed before the emphasis; ComfyUI's sdxl_clip too), with any
//   textual-inversion vectors of that chunk in place.
//
// ComfyUI weighs differently by default (its "comfy" token normalization: z_empty + (z − z_empty)·w,
// no mean restore); Octodiff follows A1111 for SD 1.x/2.x and SDXL alike.
//
// Rows of one UNet batch are padded to the same number of chunks with the empty prompt's
// encoding, as for SD 1.x (pipeline/prompt_chunks.h). A zero negative row (an empty negative
// prompt under the zeros rule, pipeline/sdxl_prompt_encoding.h) is zeros over the full 77·k
// length, as diffusers' torch.zeros_like(prompt_embeds) (A1111 would zero one chunk and pad it
// with the empty prompt's encoding).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "pipeline/generation.h"
#include "pipeline/sdxl_prompt_encoding.h"

namespace octodiff {

class StableDiffusionModel;

// Both towers' layouts as SDXL tokens. Throws octodiff::Error naming the prompt when the two
// tokenizers lay it out in different numbers of chunks.
SdxlTokenizedPrompts sdxl_layouts(TokenizedPrompts tower_1, TokenizedPrompts tower_2,
                                  const std::vector<std::string>& negative_prompts, bool zero_empty_negative);

// Device d's conditioning from layouts (encode_sdxl_device_prompts' layout path): context
// rows × 77k × (hidden_1 + hidden_2), k = the most chunks of this device's rows.
SdxlConditioning encode_sdxl_device_layouts(const ClipTextModel& encoder_1,
                                            const ClipTextModelWithProjection& encoder_2,
                                            const SdxlTokenizedPrompts& tokens, int device, int batch, bool guidance,
                                            const std::array<float, 6>& time_ids, TextEncodingCache* cache = nullptr);

// The request's prompts read for an SDXL model: its prompt syntax, long-prompt rule, comma
// backtrack and embeddings folder (SDXL embeddings only, io/textual_inversion.h). The warnings
// and the embeddings used (name, file) go into `result`.
SdxlTokenizedPrompts tokenize_sdxl_request(const StableDiffusionModel& model, const GenerationRequest& request,
                                           const std::vector<std::string>& prompts,
                                           const std::vector<std::string>& negative_prompts,
                                           bool zero_empty_negative, GenerationResult& result);

}  // namespace octodiff
