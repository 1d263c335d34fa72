// Single-file Stable Diffusion 1.x/2.x checkpoints (the original ldm/CompVis layout, one
// .safetensors holding UNet, VAE and text encoder) read as diffusers-named weights, and written
// from diffusers-named weights (spec/models.md §6).
//
// Reading: `open_single_file` detects the family (SD1: CLIP text encoder under
// `cond_stage_model.transformer.`; SD2: OpenCLIP under `cond_stage_model.model.`), inpainting
// (UNet input channels), EMA weights, and returns one WeightSource per component whose entries
// carry diffusers names; the few tensors whose ldm form differs (VAE attention 1×1 convs, the
// fused OpenCLIP in_proj) are converted by the entry's `transform` when taken. io knows nothing
// of model configs: callers turn the detection facts into configs (UNetConfig::sd1()/sd2(v) …).
//
// Block numbering is derived from the checkpoint itself, never hard-coded for SD's 4 levels:
// with `L` = layers per block (resnets per down level), ldm `input_blocks.n` (n ≥ 1) belongs to
// level (n−1) / (L+1), slot (n−1) % (L+1), where slot L is the level's downsampler
// (`input_blocks.n.0.op`); `output_blocks.n` belongs to up level n / (L+1), slot n % (L+1), the
// last slot of a level also holding its upsampler (`.1.conv` without attention, `.2.conv`
// with). `L` and the number of levels are read from where the `.0.op` downsamplers sit (or, when
// writing, from the diffusers names), so the tiny test UNet (2 levels) maps like SD (4 levels).
//
// Writing: the same rule tables run backwards (`plan_ldm_tensors`), un-squeezing 1×1 convs and
// re-fusing q/k/v rows; `write_single_file` streams a whole checkpoint tensor by tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "io/weight_source.h"

namespace octodiff {

struct SingleFileCheckpoint {
  // SDXL: CLIP under `conditioner.embedders.0.transformer.`, OpenCLIP bigG (all its blocks, and
  // text_projection) under `conditioner.embedders.1.model.`, the UNet's `label_emb.0.{0,2}`.
  enum class Family { SD1, SD2, SDXL };
  Family family = Family::SD1;
  // The scheduler's prediction type, by diffusers' rule for original checkpoints: SD1 → epsilon;
  // SD2 → v-prediction unless the checkpoint's global_step is 875000 (the 512-pixel 2-base
  // model, epsilon). Safetensors files rarely keep global_step (we read a one-element
  // `global_step` tensor when present); without it an SD2 file is taken to be a 768-v model,
  // as diffusers does — callers should let the user override this for 2-base files. Any family is
  // v-prediction when the file carries a `v_pred` marker tensor (the convention of ComfyUI,
  // Forge and kohya's scripts for v-prediction fine-tunes).
  bool v_prediction = false;
  // The file carries a `ztsnr` marker tensor (the same convention): trained with zero terminal
  // SNR (rescale_betas_zero_snr).
  bool zero_snr = false;
  std::optional<int64_t> global_step;
  int unet_in_channels = 4;       // 9 = inpainting
  int cross_attention_dim = 768;  // last dim of the first cross-attention to_k
  bool has_ema = false;           // more than 100 `model_ema.` tensors
  bool used_ema = false;          // EMA weights requested and present
  // Component weights under diffusers names; null when the file has none of that component.
  std::shared_ptr<WeightSource> unet, vae, text_encoder;
  std::shared_ptr<WeightSource> text_encoder_2;  // SDXL: CLIPTextModelWithProjection's names
  // Top-level tensors that belong to no component and are not known non-weights (reported,
  // not fatal: files often carry stray training state).
  std::vector<std::string> unrecognized;
};

// Opens and maps the checkpoint. Throws octodiff::Error when the file is not an SD 1.x/2.x/XL
// single-file checkpoint (an SDXL refiner, a diffusers component file, anything without
// `model.diffusion_model.` tensors), naming what was found. With `use_ema`, the UNet uses the
// `model_ema.` weights when the file has them (used_ema tells); otherwise the regular ones.
SingleFileCheckpoint open_single_file(const std::filesystem::path& path, bool use_ema = false);

// A ControlNet in the original layout (lllyasviel's ControlNet / A1111: `control_model.` keys, or
// the same keys without the prefix) under diffusers' ControlNetModel names: the UNet's
// input_blocks/middle_block rules, input_hint_block.* → controlnet_cond_embedding.{conv_in,
// blocks.K, conv_out}, zero_convs.K.0 → controlnet_down_blocks.K, middle_block_out.0 →
// controlnet_mid_block (diffusers' convert_controlnet_checkpoint). Tensors outside those are
// kept under their stored names, so WeightSource::finish() names them. Throws when the file
// holds no ControlNet.
std::shared_ptr<WeightSource> open_controlnet_single_file(const std::filesystem::path& path);

// ---- Writing -------------------------------------------------------------------------------

// OpenClipText: SD2's (cond_stage_model.model., plus the block and projection SD2 drops);
// SdxlClipText / SdxlOpenClipText: SDXL's two towers (conditioner.embedders.0.transformer. /
// conditioner.embedders.1.model.: every block, text_projection stored (hidden, projection), logit_scale).
enum class LdmComponent { UNet, Vae, ClipText, OpenClipText, SdxlClipText, SdxlOpenClipText };

struct NamedShape {
  std::string name;
  Shape shape;
};

// One tensor of an ldm checkpoint and the diffusers tensors it is made of: their float values,
// concatenated in order, are its values (the shape may differ only by 1×1 trailing dims).
// `sources` is empty for tensors the diffusers model does not use (SD2's last OpenCLIP block,
// text_projection) that a faithful file nevertheless carries.
struct LdmTensorPlan {
  std::string name;  // full key, prefix included
  Shape shape;
  std::vector<std::string> sources;
  bool transposed = false;  // the single source (rows, cols) stored as (cols, rows): SDXL's text_projection
};

// The ldm tensors for one component given its diffusers tensors (names decide the layout:
// levels, layers per block, which up levels have attention). Every diffusers tensor is used
// exactly once; a name without an ldm counterpart is an error.
std::vector<LdmTensorPlan> plan_ldm_tensors(LdmComponent component, const std::vector<NamedShape>& diffusers);

// The key under which a checkpoint stores the EMA copy of a UNet tensor:
// `model.diffusion_model.input_blocks.0.0.weight` → `model_ema.diffusion_modelinput_blocks00weight`.
std::string ldm_ema_name(const std::string& unet_key);

// A diffusers-named tensor to be written, with a callback producing its float32 values.
struct DiffusersTensor {
  std::string name;
  Shape shape;
  std::function<void(float* dst)> values;  // fills shape_numel(shape) floats
};

struct SingleFileContents {
  SingleFileCheckpoint::Family family = SingleFileCheckpoint::Family::SD1;
  std::vector<DiffusersTensor> unet, vae, text_encoder;  // any may be empty
  std::vector<DiffusersTensor> text_encoder_2;            // SDXL (family SDXL): CLIPTextModelWithProjection
  // Values for planned tensors without sources (see LdmTensorPlan); zeros when unset.
  std::function<void(const std::string& ldm_name, const Shape& shape, float* dst)> fill_unused;
  std::vector<TensorToWrite> extra;  // written as given (e.g. alphas_cumprod, global_step)
  std::map<std::string, std::string> metadata;
};

// Writes the checkpoint with weights stored as `dtype` (F32, F16 or BF16), one tensor in memory
// at a time. The file appears atomically.
void write_single_file(const std::filesystem::path& path, const SingleFileContents& contents, DType dtype);

// Converts float32 values to F32/F16/BF16 bytes (n elements into dst), in parallel.
void store_floats(const float* src, int64_t n, DType dtype, uint8_t* dst);

}  // namespace octodiff
