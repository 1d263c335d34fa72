#!/usr/bin/python3
"""Inpainting goldens from diffusers' StableDiffusionInpaintPipeline (v0.31.0).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_inpaint_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd]
        [--out tests/data/tiny-sd-inpaint]

Writes OUT (a diffusers folder whose text_encoder, tokenizer, vae and scheduler are relative
symlinks to tiny-sd's, so only the UNet is new):
  unet/            a random UNet2DConditionModel like tiny-sd's but in_channels 9, layers_per_block 1
                   (torch.manual_seed(2301), diffusers' default initialisation)
  model_index.json StableDiffusionInpaintPipeline
  goldens/mask_0.png, mask_1.png   64x64 grey masks (R = G = B): white = repaint, with grey levels
                   127 and 128 at the edges (binarised to 0 and 1)
  goldens/inpaint.safetensors:
    noise, posterior_noise, masked_posterior_noise  (2, 4, 32, 32): what the pipeline's
        randn_tensor calls return (the noise of prepare_latents; the eps of the init image's
        posterior sample; the eps of the masked image's posterior sample)
    masked_image_latents (2, 4, 32, 32)  vae(masked image) sampled with masked_posterior_noise x sf
    mask_latent          (2, 1, 32, 32)  torch's nearest interpolation of the binarised mask
    flax.mask_latent     (2, 1, 32, 32)  jax.image.resize(..., "nearest") of it (half-pixel centres:
                                          source index floor((i + 0.5) * in / out)), in numpy
    <case>.timesteps, <case>.unet_input0 (4, C, 32, 32: the first UNet call's input),
    <case>.latents_final (2, 4, 32, 32), <case>.images (2, 64, 64, 3)
    crop.<k>.<pad>.<W>x<H>  (4,) int64: VaeImageProcessor.get_crop_region(mask_k, W, H, pad) = x1, y1, x2, y2
  cases (8 steps, guidance 7.5, prompt embeddings of tiny-sd/goldens/pipeline.safetensors, one
  image per device, init images tiny-sd/goldens/img2img_init_{0,1}.png):
    ch9_pndm_s1, ch9_pndm_s0.75, ch9_euler_s0.75   the 9-channel UNet above
    ch4_pndm_s1, ch4_pndm_s0.75, ch4_euler_s0.75   tiny-sd's 4-channel UNet (legacy blend)
"""
import argparse
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sd", default="tests/data/tiny-sd")
ap.add_argument("--out", default="tests/data/tiny-sd-inpaint")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_inpaint as inpaint_module  # noqa: E402
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, PNDMScheduler, StableDiffusionInpaintPipeline,  # noqa: E402
                       UNet2DConditionModel)
from safetensors.torch import load_file  # noqa: E402

out = args.out
gold = os.path.join(out, "goldens")
os.makedirs(gold, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_inpaint_goldens.py")
tiny_goldens = os.path.join(args.tiny_sd, "goldens")

# ---- the model folder: a new 9-channel UNet, the rest shared with tiny-sd ----
unet9 = tiny_models.random_unet_like(os.path.join(args.tiny_sd, "unet"), 2301, in_channels=9, layers_per_block=1)
tiny_models.write_model_folder(args.tiny_sd, out, unet9, ("text_encoder", "tokenizer", "vae", "scheduler"),
                               "StableDiffusionInpaintPipeline")

# ---- masks ----
yy, xx = np.mgrid[0:64, 0:64]
m0 = np.zeros((64, 64), np.uint8)
m0[8:40, 16:48] = 255
m0[8:40, 15] = 128   # binarised to 1
m0[8:40, 48] = 127   # binarised to 0
m0[40, 16:48] = 200
m1 = np.where((xx - 36) ** 2 + (yy - 30) ** 2 <= 15 ** 2, 255, 0).astype(np.uint8)
m1[(xx - 36) ** 2 + (yy - 30) ** 2 == 16 ** 2] = 100
masks = []
for k, m in enumerate([m0, m1]):
    Image.fromarray(np.stack([m] * 3, -1), "RGB").save(os.path.join(gold, f"mask_{k}.png"))
    masks.append(Image.open(os.path.join(gold, f"mask_{k}.png")).convert("RGB"))
inits = [Image.open(os.path.join(tiny_goldens, f"img2img_init_{k}.png")).convert("RGB") for k in range(2)]

embeds = load_file(os.path.join(tiny_goldens, "pipeline.safetensors"))
prompt_embeds, negative_embeds = embeds["prompt_embeds"], embeds["negative_prompt_embeds"]

gen = torch.Generator().manual_seed(2302)
noise = torch.randn((2, 4, 32, 32), generator=gen)
posterior_noise = torch.randn((2, 4, 32, 32), generator=gen)
masked_posterior_noise = torch.randn((2, 4, 32, 32), generator=gen)
tensors = {"noise": noise, "posterior_noise": posterior_noise, "masked_posterior_noise": masked_posterior_noise}

vae_queue = []
vae_module.randn_tensor = tiny_models.popping(vae_queue)
inpaint_module.randn_tensor = tiny_models.returning(noise)

vae = AutoencoderKL.from_pretrained(os.path.join(args.tiny_sd, "vae")).eval()
unet4 = UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sd, "unet")).eval()
base_sched = PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler"))

# ---- pieces: the binarised mask at latent size (torch and jax nearest), masked-image latents ----
bin_masks = np.stack([(np.asarray(m.convert("L"), np.float32) / 255.0 >= 0.5).astype(np.float32) for m in masks])
bin_t = torch.from_numpy(bin_masks)[:, None]
tensors["mask_latent"] = torch.nn.functional.interpolate(bin_t, size=(32, 32))
idx = np.floor((np.arange(32) + 0.5) * 64 / 32).astype(np.int64)
tensors["flax.mask_latent"] = torch.from_numpy(bin_masks[:, idx][:, :, idx][:, None].copy())
init_t = torch.from_numpy(np.stack([np.asarray(im, np.float32) / 255.0 for im in inits])).permute(0, 3, 1, 2) * 2 - 1
with torch.no_grad():
    dist = vae.encode(init_t * (bin_t < 0.5)).latent_dist
    tensors["masked_image_latents"] = (dist.mean + dist.std * masked_posterior_noise) * vae.config.scaling_factor

from diffusers.image_processor import VaeImageProcessor  # noqa: E402
for k, m in enumerate(masks):
    for pad in (0, 5, 32):
        for W, H in ((64, 64), (64, 32), (32, 64)):
            tensors[f"crop.{k}.{pad}.{W}x{H}"] = torch.tensor(VaeImageProcessor.get_crop_region(m, W, H, pad=pad))

for unet_name, unet in [("ch9", unet9), ("ch4", unet4)]:
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet, scheduler=base_sched,
                                          safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    for sched_name, cls in [("pndm", PNDMScheduler), ("euler", EulerDiscreteScheduler)]:
        for strength in (1.0, 0.75):
            if sched_name == "euler" and strength == 1.0:
                continue
            case = f"{unet_name}_{sched_name}_s{strength:g}"
            pipe.scheduler = cls.from_config(base_sched.config)
            inputs = []
            hook = unet.register_forward_pre_hook(lambda mod, a, kw=None: inputs.append(a[0].clone()))
            vae_queue[:] = ([posterior_noise] if (strength < 1 or unet_name == "ch4") else []) + [masked_posterior_noise]
            finals = []

            def on_step_end(p, i, t, kw):
                finals.append(kw["latents"].clone())
                return {}

            images = pipe(prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds, image=inits,
                          mask_image=masks, strength=strength, num_inference_steps=8, guidance_scale=7.5,
                          height=64, width=64, output_type="np", callback_on_step_end=on_step_end).images
            hook.remove()
            assert not vae_queue, "the pipeline drew fewer posterior samples than expected"
            t_start = 8 - min(int(8 * strength), 8)
            tensors[f"{case}.timesteps"] = pipe.scheduler.timesteps[t_start * pipe.scheduler.order:].to(torch.float64)
            tensors[f"{case}.unet_input0"] = inputs[0]
            tensors[f"{case}.latents_final"] = finals[-1]
            tensors[f"{case}.images"] = torch.from_numpy(images)
            print(case, "calls", len(inputs), "latent scale", float(finals[-1].abs().max()))

tiny_models.save_tensors(tensors, os.path.join(gold, "inpaint.safetensors"), provenance)
