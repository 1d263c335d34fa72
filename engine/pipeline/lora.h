// LoRAs for a loaded model: which files with which strengths, merged into the weights at load
// (so a denoising step costs nothing more), and the A1111 prompt syntax `<lora:name:0.8>`.
//
// The merge (spec/fast-sampling.md §4, as diffusers' fuse_lora):
//     W ← W + Σ_i strength_i · (alpha_i / rank_i) · (up_i @ down_i)
// in float32, on the parameter as read from the checkpoint, before it is packed (bf16 models
// round the merged weight once, when packing). Convolutions merge as matrices
// (out, in·kh·kw); an update of a 1×1 convolution fits a linear layer of the same size and the
// reverse. LoRAs apply in the order given (the sums differ in the last bits only).
//
// How switching LoRAs avoids repacking (StableDiffusionModel::with_loras, pipeline/model.h): a
// model loaded without LoRAs is the *base*; it remembers, per UNet and text-encoder layer, the
// packed weights it made or mapped from its weight cache (models/layers.h, PackedLayers) and
// keeps its weight sources. Applying a LoRA set loads those components (SDXL: the second text
// encoder too) again from the same
// sources with the LoRA's parameters patched (WeightSource::patch): a layer with no patched
// tensor shares the base's packed weights (nothing read, nothing packed), only the layers a LoRA
// touches are read, merged and packed, onto the heap (never into the base's weight cache, which
// keeps the checkpoint's own weights). The VAE and tokenizer are the base's. Biases and norm
// parameters are copied again (small). The counts are in StableDiffusionModel::lora_load_stats.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/lora.h"
#include "io/weight_source.h"
#include "models/configs.h"

namespace octodiff {

struct LoraSpec {
  std::filesystem::path path;  // a .safetensors LoRA file
  float strength = 1.0f;       // the multiplier (A1111's weight); 0 leaves the model unchanged
};

// A LoRA file read for one model, with its strength (what a model loaded with it reports).
struct AppliedLora {
  LoraSpec spec;
  std::string name;    // file stem, as the prompt syntax names it
  std::string format;  // LoraFile::format
  int unet_layers = 0, text_encoder_layers = 0;  // parameters it changes
  int text_encoder_2_layers = 0;                  // SDXL's second text encoder
};

// The parameters of our UNet and text encoder(s) a LoRA may change (models/parameter_catalog.h);
// `text_encoder_2`: SDXL's second tower (CLIPTextModelWithProjection), null for SD 1.x/2.x.
LoraTargets lora_targets(const UNetConfig& unet, const ClipTextConfig& text_encoder,
                         const ClipTextConfig* text_encoder_2 = nullptr);

// Reads every file (io/lora.h) and patches the parameters they change in the sources so that
// taking them yields the merged weights (`text_encoder_2`: SDXL's, null otherwise). Errors name
// the file and the tensor.
std::vector<AppliedLora> patch_loras(const std::vector<LoraSpec>& loras, const LoraTargets& targets, WeightSource& unet,
                                     WeightSource& text_encoder, WeightSource* text_encoder_2 = nullptr);

// W + Σ strength · scale · (up @ down) for one parameter (W's shape; the updates as matrices).
struct LoraTerm {
  Tensor down, up;  // rank × fan_in, out × rank
  float factor = 0; // strength · alpha / rank
};
Tensor merge_lora_terms(const Tensor& weight, const std::vector<LoraTerm>& terms);

// "FILE" or "FILE:STRENGTH" (the CLI's --lora); a path may itself contain ':' — only a suffix
// that parses as a number is taken as the strength.
LoraSpec parse_lora_argument(const std::string& text);

// The A1111 prompt syntax: every `<lora:NAME>` (strength 1) or `<lora:NAME:STRENGTH>` tag is
// removed from the prompts and NAME resolved to `lora_dir`/NAME.safetensors. The LoRAs apply to
// the whole model, so to every prompt: the same NAME in several prompts is one LoRA (with the
// same strength, else an error). Errors: an unknown NAME (the message lists the folder's LoRAs),
// a strength that is not a finite number, a tag with more fields, tags but no folder.
struct PromptLoras {
  std::vector<std::string> prompts;  // without the tags (spaces around a tag collapsed to one)
  std::vector<LoraSpec> loras;       // in order of first appearance
};
PromptLoras extract_prompt_loras(const std::vector<std::string>& prompts, const std::filesystem::path& lora_dir);

}  // namespace octodiff
