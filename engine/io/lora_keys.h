// Where the modules a LoRA file names live in our models: kohya and diffusers/PEFT module names
// mapped to diffusers parameter names (`down_blocks.0.attentions.0.proj_in.weight`).
//
// io knows no models: the caller lists the parameters the UNet and the text encoder have
// (names and shapes, e.g. from models/parameter_catalog.h), and the table is built from them:
//  - kohya, diffusers-named: `lora_unet_` + the parameter's module path with '.' → '_'
//    (`lora_unet_down_blocks_0_attentions_0_proj_in`), `lora_te_` / `lora_te1_` + the text
//    encoder's (`lora_te_text_model_encoder_layers_0_self_attn_q_proj`), and for SDXL's second
//    text encoder `lora_te2_` + its module path. kohya made these names
//    exactly that way, so looking them up in a table of our own names is unambiguous, unlike
//    diffusers' string replacements (`_convert_unet_lora_key`), which cannot tell '_' inside a
//    name from a former '.'.
//  - kohya, LDM-named (`lora_unet_input_blocks_1_1_proj_in`, `lora_unet_middle_block_0_in_layers_2`,
//    `lora_unet_output_blocks_5_2_conv`, `lora_unet_time_embed_0`, `lora_unet_out_2`): the LDM
//    name of each UNet parameter comes from the single-file loader's own rule table
//    (io/single_file.h, plan_ldm_tensors), not from a second mapping.
//  - diffusers/PEFT: the module path as it is (`unet.<module>`, `text_encoder.<module>`,
//    SDXL's `text_encoder_2.<module>`), the
//    old attention-processor names (`attn1.processor.to_q_lora` → `attn1.to_q`, `to_out_lora` →
//    `to_out.0`; in the text encoder `self_attn.to_q_lora` → `self_attn.q_proj`, `to_out_lora`
//    → `out_proj`) resolved by diffusers' rules (utils/state_dict_utils.py).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/single_file.h"

namespace octodiff {

enum class LoraComponent { UNet, TextEncoder, TextEncoder2 };
const char* lora_component_name(LoraComponent c);  // "unet", "text_encoder", "text_encoder_2"

// The parameters a LoRA may change, by diffusers name and shape (weights of rank 2 or 4 are used).
// text_encoder_2: SDXL's second text tower (CLIPTextModelWithProjection); empty for SD 1.x/2.x,
// whose LoRA files then refuse `lora_te2_` / `text_encoder_2.` tensors as SDXL's.
struct LoraTargets {
  std::vector<NamedShape> unet, text_encoder, text_encoder_2 = {};
};

struct LoraTarget {
  LoraComponent component = LoraComponent::UNet;
  std::string parameter;  // e.g. "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight"
  Shape shape;
};

class LoraKeyMap {
 public:
  explicit LoraKeyMap(const LoraTargets& targets);

  // A kohya module name (the key up to its first '.', e.g. "lora_unet_down_blocks_0_resnets_0_conv1");
  // `ldm_named` tells whether it was found through the LDM names.
  std::optional<LoraTarget> kohya(const std::string& module, bool* ldm_named = nullptr) const;
  // A diffusers module path in one component ("down_blocks.0.attentions.0.proj_in",
  // "text_model.encoder.layers.0.self_attn.q_proj"); old attention-processor names resolved.
  std::optional<LoraTarget> diffusers(LoraComponent component, const std::string& module) const;
  // Whether the model is SDXL (has a second text encoder), for messages and the te2 prefixes.
  bool sdxl() const { return !text_encoder_2_.empty(); }

 private:
  struct KohyaEntry {
    LoraTarget target;
    bool ldm = false;
  };
  std::map<std::string, KohyaEntry> kohya_;
  std::map<std::string, Shape> unet_, text_encoder_, text_encoder_2_;  // parameter name → shape
};

}  // namespace octodiff
