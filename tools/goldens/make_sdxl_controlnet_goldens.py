#!/usr/bin/python3
"""Tiny random SDXL ControlNets for tests/data/tiny-sdxl's UNet, and goldens from diffusers v0.31.0.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_sdxl_controlnet_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sdxl tests/data/tiny-sdxl] [--out tests/data/tiny-sdxl-controlnet]

Writes into OUT:
  controlnet_a/, controlnet_b/  ControlNetModel.from_unet(tiny-sdxl unet, conditioning_embedding_out_channels
      (16, 32), load_weights_from_unet=False) (diffusers folders: addition_embed_type "text_time",
      projection_class_embeddings_input_dim 88, transformer_layers_per_block [1, 1, 2], 3 levels), seeds
      5252 / 5353; the zero-initialised modules (controlnet_cond_embedding.conv_out, controlnet_down_blocks.*,
      controlnet_mid_block) get torch's default initialisation instead (reset_parameters) so the residuals
      are not zero. controlnet_b has controlnet_conditioning_channel_order "bgr".
  control_0.png, control_1.png (32x32), control_2.png (48x40, resized to 32x32 by the pipeline)
  goldens.safetensors:
    model.sample (2,4,16,16), model.timesteps (2,) int64 [801, 801], model.context (2,77,80),
    model.text_embeds (2,40), model.time_ids (2,6), model.cond (2,3,32,32) in [0,1], model.scale () = 0.7
    model.a.down.K (K < 9), model.a.mid: controlnet_a(sample, t, context, cond, conditioning_scale=0.7,
                                                      added_cond_kwargs={text_embeds, time_ids})
    model.b.down.K, model.b.mid: the same for controlnet_b
    model.unet_out: tiny-sdxl unet(sample, t, context, added_cond_kwargs, down_block_additional_residuals=a.down,
                                   mid_block_additional_residual=a.mid)
    pipeline: StableDiffusionXLControlNetPipeline (tiny-sdxl unet + vae + Euler from the folder, 5 steps,
      guidance 5, prompt_embeds / pooled_prompt_embeds and the negative ones / latents_init of tiny-sdxl's
      goldens/pipeline.safetensors, height = width = 32, add_watermarker False):
      single.*: controlnet_a, scale 0.8, image [control_0, control_1] (one per prompt)
      multi.*:  MultiControlNet [a, b], scales [1.0, 0.6], control_guidance_start [0.0, 0.2],
                control_guidance_end [0.9, 0.7], image [control_2, control_0] (one per ControlNet,
                for both prompts)
      shared.*: controlnet_a, scale 0.7, control_guidance_end 0.8, image control_2 (for both prompts: what
                octodiff-cli's --controlnet PATH:0.7 --control-image --control-end 0.8 gives)
      <case>.latents_final (2,4,16,16) (output_type="latent"), <case>.images (2,32,32,3) (output_type="np"),
      <case>.keep (calls, nets): diffusers' controlnet_keep
"""
import argparse
import json
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sdxl", default="tests/data/tiny-sdxl")
ap.add_argument("--out", default="tests/data/tiny-sdxl-controlnet")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from diffusers import (AutoencoderKL, ControlNetModel, EulerDiscreteScheduler,  # noqa: E402
                       StableDiffusionXLControlNetPipeline, UNet2DConditionModel)
from diffusers.pipelines.controlnet.multicontrolnet import MultiControlNetModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

SEED_A, SEED_B, IMAGE_SEED, MODEL_INPUT_SEED = 5252, 5353, 5454, 5555
STEPS, GUIDANCE, SIZE = 5, 5.0, 32

out, tiny = args.out, args.tiny_sdxl
os.makedirs(out, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_sdxl_controlnet_goldens.py")

unet = UNet2DConditionModel.from_pretrained(os.path.join(tiny, "unet")).eval()
vae = AutoencoderKL.from_pretrained(os.path.join(tiny, "vae")).eval()
scheduler = EulerDiscreteScheduler.from_pretrained(os.path.join(tiny, "scheduler"))

for name, seed, order in [("controlnet_a", SEED_A, "rgb"), ("controlnet_b", SEED_B, "bgr")]:
    tiny_models.random_controlnet(unet, seed, order).save_pretrained(os.path.join(out, name), safe_serialization=True)
cn_a = ControlNetModel.from_pretrained(os.path.join(out, "controlnet_a")).eval()
cn_b = ControlNetModel.from_pretrained(os.path.join(out, "controlnet_b")).eval()
assert cn_a.config.addition_embed_type == "text_time" and cn_a.config.projection_class_embeddings_input_dim == 88
assert list(cn_a.config.transformer_layers_per_block) == [1, 1, 2]

# ---- control images ----
rng = np.random.RandomState(IMAGE_SEED)
yy, xx = np.mgrid[0:40, 0:48].astype(np.float64)
pictures = []
for k, (w, h) in enumerate([(32, 32), (32, 32), (48, 40)]):
    base = np.zeros((h, w, 3))
    base[..., 0] = 255.0 * ((xx[:h, :w] // (4 + 2 * k) + yy[:h, :w] // 6) % 2)
    base[..., 1] = 128 + 100 * np.sin((xx[:h, :w] + yy[:h, :w]) / (3.0 + k))
    base[..., 2] = 255.0 * (((xx[:h, :w] - w / 2) ** 2 + (yy[:h, :w] - h / 2) ** 2) < (h / 3) ** 2)
    pixels = np.clip(base + rng.normal(0, 6, size=base.shape), 0, 255).round().astype(np.uint8)
    path = os.path.join(out, f"control_{k}.png")
    Image.fromarray(pixels, "RGB").save(path)
    pictures.append(Image.open(path).convert("RGB"))

tensors = {}
# ---- model level ----
g = torch.Generator().manual_seed(MODEL_INPUT_SEED)
sample = torch.randn((2, 4, 16, 16), generator=g)
context = torch.randn((2, 77, 80), generator=g)
text_embeds = torch.randn((2, 40), generator=g)
cond = torch.rand((2, 3, 32, 32), generator=g)
time_ids = torch.tensor([[32, 32, 0, 0, 32, 32], [48, 40, 4, 8, 32, 32]], dtype=torch.float32)
timesteps = torch.tensor([801, 801], dtype=torch.int64)
added = {"text_embeds": text_embeds, "time_ids": time_ids}
tensors.update({"model.sample": sample, "model.context": context, "model.text_embeds": text_embeds,
                "model.time_ids": time_ids, "model.cond": cond, "model.timesteps": timesteps,
                "model.scale": torch.tensor(0.7)})
with torch.no_grad():
    for name, cn in [("a", cn_a), ("b", cn_b)]:
        down, mid = cn(sample, timesteps, encoder_hidden_states=context, controlnet_cond=cond, conditioning_scale=0.7,
                       added_cond_kwargs=added, return_dict=False)
        for k, d in enumerate(down):
            tensors[f"model.{name}.down.{k}"] = d
        tensors[f"model.{name}.mid"] = mid
        print(name, len(down), "down residuals, scales", [round(float(d.abs().max()), 3) for d in down],
              "mid", round(float(mid.abs().max()), 3))
    # The added conditioning matters: other time ids give other residuals.
    _, other_mid = cn_a(sample, timesteps, encoder_hidden_states=context, controlnet_cond=cond,
                        conditioning_scale=0.7, added_cond_kwargs={"text_embeds": text_embeds, "time_ids": time_ids + 16},
                        return_dict=False)
    moved = float((other_mid - tensors["model.a.mid"]).abs().max())
    print("controlnet_a's mid residual with other time ids differs by", moved)
    assert moved > 1e-3, "the text_time conditioning did not reach the residuals"
    down_a = [tensors[f"model.a.down.{k}"] for k in range(len(down))]
    tensors["model.unet_out"] = unet(sample, timesteps, context, added_cond_kwargs=added,
                                     down_block_additional_residuals=down_a,
                                     mid_block_additional_residual=tensors["model.a.mid"]).sample
    plain = unet(sample, timesteps, context, added_cond_kwargs=added).sample
    print("unet with residuals differs from without by", float((tensors["model.unet_out"] - plain).abs().max()))

# ---- pipeline level ----
embeds = load_file(os.path.join(tiny, "goldens", "pipeline.safetensors"))


def run(case, controlnet, **kw):
    pipe = StableDiffusionXLControlNetPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None,
                                               tokenizer_2=None, unet=unet, controlnet=controlnet,
                                               scheduler=scheduler, force_zeros_for_empty_prompt=True,
                                               add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    common = dict(prompt_embeds=embeds["prompt_embeds"], pooled_prompt_embeds=embeds["pooled_prompt_embeds"],
                  negative_prompt_embeds=embeds["negative_prompt_embeds"],
                  negative_pooled_prompt_embeds=embeds["negative_pooled_prompt_embeds"],
                  latents=embeds["latents_init"].clone(), num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                  height=SIZE, width=SIZE, **kw)
    latents = pipe(output_type="latent", **common).images
    images = pipe(output_type="np", **common).images
    tensors[f"{case}.latents_final"] = latents
    tensors[f"{case}.images"] = torch.from_numpy(images.copy()).to(torch.float32)
    n = len(pipe.scheduler.timesteps)
    starts = kw.get("control_guidance_start", 0.0)
    ends = kw.get("control_guidance_end", 1.0)
    starts = starts if isinstance(starts, list) else [starts]
    ends = ends if isinstance(ends, list) else [ends]
    keep = [[1.0 - float(i / n < s or (i + 1) / n > e) for s, e in zip(starts, ends)] for i in range(n)]
    tensors[f"{case}.keep"] = torch.tensor(keep, dtype=torch.float64)
    print(case, "timesteps", pipe.scheduler.timesteps.tolist(), "keep", keep, "latent scale",
          float(latents.abs().max()), "image mean", float(images.mean()))


with torch.no_grad():
    run("single", cn_a, image=[pictures[0], pictures[1]], controlnet_conditioning_scale=0.8)
    run("multi", MultiControlNetModel([cn_a, cn_b]), image=[pictures[2], pictures[0]],
        controlnet_conditioning_scale=[1.0, 0.6], control_guidance_start=[0.0, 0.2], control_guidance_end=[0.9, 0.7])
    run("shared", cn_a, image=pictures[2], controlnet_conditioning_scale=0.7, control_guidance_end=0.8)

# Without the ControlNet the same run is tiny-sdxl's "cfg" golden: the ControlNet changed the images.
print("single images differ from tiny-sdxl's cfg images by",
      float((tensors["single.images"] - embeds["cfg.images"]).abs().max()))

tiny_models.save_tensors(tensors, os.path.join(out, "goldens.safetensors"), provenance)
with open(os.path.join(out, "goldens.json"), "w") as f:
    json.dump({"down_residuals": len(down), **provenance}, f, indent=1)
print("wrote", out)
