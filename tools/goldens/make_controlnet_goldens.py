#!/usr/bin/python3
"""Tiny random ControlNets for tests/data/tiny-sd's UNet, and ControlNet goldens from diffusers v0.31.0.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_controlnet_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd] [--out tests/data/tiny-controlnet]

Writes into OUT:
  controlnet_a/, controlnet_b/  ControlNetModel.from_unet(tiny-sd unet, conditioning_embedding_out_channels
      (16, 32), load_weights_from_unet=False) (diffusers folders), seeds 4242 / 4343; the zero-initialised
      modules (controlnet_cond_embedding.conv_out, controlnet_down_blocks.*, controlnet_mid_block) get
      torch's default initialisation instead (reset_parameters) so the residuals are not zero.
      controlnet_b has controlnet_conditioning_channel_order "bgr".
  controlnet_a_ldm.safetensors  controlnet_a's weights in the original ControlNet layout
      ("control_model.*" keys: the inverse of diffusers' convert_controlnet_checkpoint, checked here by
      running convert_controlnet_checkpoint on it and comparing every tensor).
  control_0.png, control_1.png (64x64), control_2.png (96x80, resized to 64x64 by the pipeline)
  goldens.safetensors:
    model.sample (2,4,32,32), model.timesteps (2,) int64 [981, 981], model.context (2,77,32),
    model.cond (2,3,64,64) in [0,1], model.scale () = 0.7
    model.a.down.K (K < 7), model.a.mid: controlnet_a(sample, t, context, cond, conditioning_scale=0.7)
    model.b.down.K, model.b.mid: the same for controlnet_b
    model.unet_out: tiny-sd unet(sample, t, context, down_block_additional_residuals=a.down,
                                  mid_block_additional_residual=a.mid)
    pipeline: StableDiffusionControlNetPipeline (tiny-sd unet + vae, PNDM 5 steps, guidance 7.5,
      prompt_embeds / negative_prompt_embeds / latents_init of tiny-sd goldens/pipeline.safetensors,
      height = width = 64):
      single.*: controlnet_a, scale 0.8, image [control_0, control_1] (one per prompt)
      multi.*:  MultiControlNet [a, b], scales [1.0, 0.6], control_guidance_start [0.0, 0.2],
                control_guidance_end [0.9, 0.7], image [control_2, control_0] (one per ControlNet,
                for both prompts)
      <case>.latents_final (2,4,32,32) (output_type="latent"), <case>.images (2,64,64,3) (output_type="np"),
      <case>.keep (calls, nets): diffusers' controlnet_keep
"""
import argparse
import json
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sd", default="tests/data/tiny-sd")
ap.add_argument("--out", default="tests/data/tiny-controlnet")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from diffusers import (AutoencoderKL, ControlNetModel, PNDMScheduler, StableDiffusionControlNetPipeline,  # noqa: E402
                       UNet2DConditionModel)
from diffusers.loaders.single_file_utils import convert_controlnet_checkpoint  # noqa: E402
from diffusers.pipelines.controlnet.multicontrolnet import MultiControlNetModel  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

out = args.out
os.makedirs(out, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_controlnet_goldens.py")

unet = UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sd, "unet")).eval()
vae = AutoencoderKL.from_pretrained(os.path.join(args.tiny_sd, "vae")).eval()

cn_a = tiny_models.random_controlnet(unet, 4242, "rgb")
cn_b = tiny_models.random_controlnet(unet, 4343, "bgr")
for name, cn in [("controlnet_a", cn_a), ("controlnet_b", cn_b)]:
    cn.save_pretrained(os.path.join(out, name), safe_serialization=True)
cn_a = ControlNetModel.from_pretrained(os.path.join(out, "controlnet_a")).eval()
cn_b = ControlNetModel.from_pretrained(os.path.join(out, "controlnet_b")).eval()


# ---- controlnet_a in the original layout ----
def ldm_state_dict(cn):
    sd = cn.state_dict()
    L = cn.config.layers_per_block
    levels = len(cn.config.block_out_channels)
    renames = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
               "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
    out_sd = {}

    def resnet(prefix_d, prefix_l):
        for k, v in sd.items():
            if k.startswith(prefix_d + "."):
                rest = k[len(prefix_d) + 1:]
                head, leaf = rest.split(".", 1)
                out_sd[f"{prefix_l}.{renames[head]}.{leaf}"] = v

    def same(prefix_d, prefix_l):
        for k, v in sd.items():
            if k.startswith(prefix_d + "."):
                out_sd[prefix_l + k[len(prefix_d):]] = v

    same("time_embedding.linear_1", "time_embed.0")
    same("time_embedding.linear_2", "time_embed.2")
    same("conv_in", "input_blocks.0.0")
    for b in range(levels):
        for j in range(L):
            n = 1 + b * (L + 1) + j
            resnet(f"down_blocks.{b}.resnets.{j}", f"input_blocks.{n}.0")
            same(f"down_blocks.{b}.attentions.{j}", f"input_blocks.{n}.1")
        if b + 1 < levels:
            same(f"down_blocks.{b}.downsamplers.0.conv", f"input_blocks.{1 + b * (L + 1) + L}.0.op")
    resnet("mid_block.resnets.0", "middle_block.0")
    same("mid_block.attentions.0", "middle_block.1")
    resnet("mid_block.resnets.1", "middle_block.2")
    same("controlnet_cond_embedding.conv_in", "input_hint_block.0")
    nblocks = len(cn.controlnet_cond_embedding.blocks)
    for i in range(nblocks):
        same(f"controlnet_cond_embedding.blocks.{i}", f"input_hint_block.{2 * (i + 1)}")
    same("controlnet_cond_embedding.conv_out", f"input_hint_block.{2 * (nblocks + 1)}")
    for i in range(len(cn.controlnet_down_blocks)):
        same(f"controlnet_down_blocks.{i}", f"zero_convs.{i}.0")
    same("controlnet_mid_block", "middle_block_out.0")
    assert len(out_sd) == len(sd), (len(out_sd), len(sd))
    return {"control_model." + k: v.contiguous() for k, v in out_sd.items()}


ldm = ldm_state_dict(cn_a)
# diffusers' own converter must give back every tensor. Its input_hint_block conversion assumes
# conv_out at index 14 (SD's 4 embedding levels); ours has 2 levels (conv_out at 6), so the blocks
# it reads are checked for the indices that exist and conv_out by our mapping.
back = convert_controlnet_checkpoint(ldm, dict(cn_a.config))
sd_a = cn_a.state_dict()
checked = 0
for k, v in back.items():
    if v is None or (k not in sd_a and k.startswith("controlnet_cond_embedding.blocks.")):
        continue  # the converter's index-14 assumption (above)
    assert k in sd_a, k
    assert torch.equal(v, sd_a[k]), k
    checked += 1
print("convert_controlnet_checkpoint round trip:", checked, "of", len(sd_a), "tensors equal")
save_file(ldm, os.path.join(out, "controlnet_a_ldm.safetensors"), metadata=provenance)

# ---- control images ----
rng = np.random.RandomState(4444)
yy, xx = np.mgrid[0:80, 0:96].astype(np.float64)
pictures = []
for k, (w, h) in enumerate([(64, 64), (64, 64), (96, 80)]):
    base = np.zeros((h, w, 3))
    base[..., 0] = 255.0 * ((xx[:h, :w] // (8 + 4 * k) + yy[:h, :w] // 12) % 2)
    base[..., 1] = 128 + 100 * np.sin((xx[:h, :w] + yy[:h, :w]) / (5.0 + k))
    base[..., 2] = 255.0 * (((xx[:h, :w] - w / 2) ** 2 + (yy[:h, :w] - h / 2) ** 2) < (h / 3) ** 2)
    pixels = np.clip(base + rng.normal(0, 6, size=base.shape), 0, 255).round().astype(np.uint8)
    path = os.path.join(out, f"control_{k}.png")
    Image.fromarray(pixels, "RGB").save(path)
    pictures.append(Image.open(path).convert("RGB"))

tensors = {}
# ---- model level ----
g = torch.Generator().manual_seed(4545)
sample = torch.randn((2, 4, 32, 32), generator=g)
context = torch.randn((2, 77, 32), generator=g)
cond = torch.rand((2, 3, 64, 64), generator=g)
timesteps = torch.tensor([981, 981], dtype=torch.int64)
tensors.update({"model.sample": sample, "model.context": context, "model.cond": cond,
                "model.timesteps": timesteps, "model.scale": torch.tensor(0.7)})
with torch.no_grad():
    for name, cn in [("a", cn_a), ("b", cn_b)]:
        down, mid = cn(sample, timesteps, encoder_hidden_states=context, controlnet_cond=cond,
                       conditioning_scale=0.7, return_dict=False)
        for k, d in enumerate(down):
            tensors[f"model.{name}.down.{k}"] = d
        tensors[f"model.{name}.mid"] = mid
        print(name, len(down), "down residuals, scales", [round(float(d.abs().max()), 3) for d in down],
              "mid", round(float(mid.abs().max()), 3))
    down_a = [tensors[f"model.a.down.{k}"] for k in range(len(down))]
    tensors["model.unet_out"] = unet(sample, timesteps, context, down_block_additional_residuals=down_a,
                                     mid_block_additional_residual=tensors["model.a.mid"]).sample
    plain = unet(sample, timesteps, context).sample
    print("unet with residuals differs from without by", float((tensors["model.unet_out"] - plain).abs().max()))

# ---- pipeline level ----
embeds = load_file(os.path.join(args.tiny_sd, "goldens", "pipeline.safetensors"))
scheduler = PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler"))


def run(case, controlnet, **kw):
    pipe = StableDiffusionControlNetPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet,
                                             controlnet=controlnet, scheduler=scheduler, safety_checker=None,
                                             feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    common = dict(prompt_embeds=embeds["prompt_embeds"], negative_prompt_embeds=embeds["negative_prompt_embeds"],
                  latents=embeds["latents_init"], num_inference_steps=5, guidance_scale=7.5, height=64, width=64, **kw)
    latents = pipe(output_type="latent", **common).images
    images = pipe(output_type="np", **common).images
    tensors[f"{case}.latents_final"] = latents
    tensors[f"{case}.images"] = torch.from_numpy(images)
    n = len(pipe.scheduler.timesteps)
    starts = kw.get("control_guidance_start", 0.0)
    ends = kw.get("control_guidance_end", 1.0)
    starts = starts if isinstance(starts, list) else [starts]
    ends = ends if isinstance(ends, list) else [ends]
    keep = [[1.0 - float(i / n < s or (i + 1) / n > e) for s, e in zip(starts, ends)] for i in range(n)]
    tensors[f"{case}.keep"] = torch.tensor(keep, dtype=torch.float64)
    print(case, "calls", n, "keep", keep, "latent scale", float(latents.abs().max()))


with torch.no_grad():
    run("single", cn_a, image=[pictures[0], pictures[1]], controlnet_conditioning_scale=0.8)
    run("multi", MultiControlNetModel([cn_a, cn_b]), image=[pictures[2], pictures[0]],
        controlnet_conditioning_scale=[1.0, 0.6], control_guidance_start=[0.0, 0.2], control_guidance_end=[0.9, 0.7])

tiny_models.save_tensors(tensors, os.path.join(out, "goldens.safetensors"), provenance)
with open(os.path.join(out, "goldens.json"), "w") as f:
    json.dump({"down_residuals": len(down), **provenance}, f, indent=1)
