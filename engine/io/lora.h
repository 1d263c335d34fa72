// LoRA files: read through the validated safetensors reader (io/safetensors.h), the format
// detected per tensor and every (down, up, alpha) triple mapped to the diffusers parameter of our
// UNet or text encoder it changes (io/lora_keys.h). The merge itself is the caller's
// (pipeline/lora.h): W ← W + strength · scale · (up @ down).
//
// Formats (spec/fast-sampling.md §4; diffusers loaders/lora_conversion_utils.py, lora_pipeline.py):
//   kohya            `lora_unet_<module with _>.lora_down.weight`, `.lora_up.weight`, `.alpha`;
//                    `lora_te_…` / `lora_te1_…` for the text encoder, `lora_te2_…` for SDXL's
//                    second one; LDM-named UNet modules too (SDXL's kohya files use them:
//                    `lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q`)
//   diffusers/PEFT   `unet.<module>.lora_A.weight` / `.lora_B.weight`, `text_encoder.<module>.…`,
//                    SDXL's `text_encoder_2.<module>.…`
//   diffusers (old)  `….lora.down.weight` / `.lora.up.weight`, `….lora_linear_layer.down.weight`
//   diffusers (attention processors)  `unet.<…>.attn1.processor.to_q_lora.down.weight`, …
//                    (`to_out_lora` is `to_out.0`); text encoder `self_attn.to_q_lora` is `q_proj`
// Shapes: down is (rank, in) or (rank, in, kh, kw) for a convolution, up (out, rank) or
// (out, rank, 1, 1). scale = alpha / rank with the file's alpha; 1 without one (as diffusers: PEFT
// files carry no alpha, and a kohya module without `.alpha` gets lora_alpha = rank).
//
// Refused, with an octodiff::Error naming the file and the tensor: LyCORIS (LoHa `hada_*`, LoKr
// `lokr_*`, DoRA `dora_scale`, CP-decomposed `lora_mid`); SDXL files (`lora_te2_`,
// `text_encoder_2.`) on an SD 1.x/2.x model; a module no parameter of the model has, or whose
// update does not have the parameter's shape (a LoRA for another architecture, e.g. SD 1.x on
// SDXL: the message names the tensor and gives both shapes); a key of
// no LoRA format (e.g. a checkpoint given as a LoRA); a down without its up or the reverse;
// rank 0 or larger than the layer (min(out, in·kh·kw)); a NaN, infinite or non-positive alpha;
// non-finite weights; integer tensors; whatever the safetensors reader refuses.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/lora_keys.h"

namespace octodiff {

// The low-rank update of one parameter.
struct LoraPair {
  LoraTarget target;   // component, diffusers parameter name and its shape
  std::string origin;  // the down tensor's name in the file (for messages)
  Tensor down;         // rank × fan_in (fan_in = in·kh·kw), float32
  Tensor up;           // out × rank, float32
  float scale = 1.0f;  // alpha / rank, or 1
  int64_t rank() const { return down.dim(0); }
};

struct LoraFile {
  std::filesystem::path path;
  // "kohya", "kohya (LDM names)", "diffusers/PEFT", "diffusers (old)",
  // "diffusers (attention processors)"; joined by " + " when a file mixes them.
  std::string format;
  std::vector<LoraPair> pairs;  // sorted by (component, parameter)
};

LoraFile read_lora(const std::filesystem::path& path, const LoraKeyMap& keys);

}  // namespace octodiff
