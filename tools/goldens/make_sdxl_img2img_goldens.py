#!/usr/bin/python3
"""SDXL image-to-image goldens from diffusers' StableDiffusionXLImg2ImgPipeline (v0.31.0) on tests/data/tiny-sdxl.

Usage (from the repository root, after make_tiny_sdxl.py):
    /usr/bin/python3 tools/goldens/make_sdxl_img2img_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sdxl tests/data/tiny-sdxl]

Writes into TINY_SDXL/goldens:
  img2img_init_0.png, img2img_init_1.png   two 32x64 (W x H) RGB init images (fixed numpy seed); both
                   sides are multiples of 32, so the Flax preprocessing (floor to 32) keeps them too
  img2img.safetensors:
    posterior_noise  (2, 4, 32, 16)  the eps of vae.encode(image).latent_dist.sample(generator)
    noise            (2, 4, 32, 16)  the noise prepare_latents adds with scheduler.add_noise
    <case>.timesteps       the timesteps the pipeline ran (after get_timesteps' cut)
    <case>.time_ids        (4, 6) the UNet's added_cond_kwargs["time_ids"] ([negative; positive] rows)
    <case>.latents_start   (2, 4, 32, 16) the latents after add_noise (what the loop starts from)
    <case>.latents_final   (2, 4, 32, 16) output_type="latent"
    <case>.images          (2, 64, 32, 3) output_type="np"
  Cases (8 steps, guidance 5, the prompt / negative / pooled embeddings of pipeline.safetensors,
  requires_aesthetics_score False as for base models, the folder's Euler unless said):
    euler_s0.5, euler_s0.75   one init image per image (img2img_init_0 and _1)
    euler_s0.75_one           img2img_init_0 for both images (each with its own posterior eps)
    euler_s0.75_micro         original_size (96, 80), crops_coords_top_left (4, 8), target_size (48, 40)
    ddim_s0.75                DDIMScheduler.from_config(the folder's config)
  The pipeline draws both random tensors from its generator with randn_tensor; this script replaces
  randn_tensor in the pipeline and VAE modules with functions returning the saved tensors, so a
  caller can inject exactly them. The VAE has force_upcast (SDXL's): it encodes in float32, as
  everything here is anyway.
"""
import argparse
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sdxl", default="tests/data/tiny-sdxl")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.pipelines.stable_diffusion_xl.pipeline_stable_diffusion_xl_img2img as img2img_module  # noqa: E402
from diffusers import (AutoencoderKL, DDIMScheduler, EulerDiscreteScheduler, StableDiffusionXLImg2ImgPipeline,  # noqa: E402
                       UNet2DConditionModel)
from safetensors.torch import load_file  # noqa: E402

WIDTH, HEIGHT, STEPS, GUIDANCE = 32, 64, 8, 5.0
MICRO = {"original_size": (96, 80), "crops_coords_top_left": (4, 8), "target_size": (48, 40)}
gold = os.path.join(args.tiny_sdxl, "goldens")
provenance = tiny_models.provenance("tools/goldens/make_sdxl_img2img_goldens.py")


def init_images(rng):
    """Smooth colour fields plus noise (so the VAE sees structure), written as PNG and read back."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    images = []
    for k in range(2):
        base = np.stack([128 + 100 * np.sin((xx + 7 * k) / 6.0), 128 + 100 * np.cos((yy - 5 * k) / 9.0),
                         128 + 60 * np.sin((xx + yy) / 11.0 + k)], axis=-1)
        pixels = np.clip(base + rng.normal(0, 12, size=base.shape), 0, 255).round().astype(np.uint8)
        path = os.path.join(gold, f"img2img_init_{k}.png")
        Image.fromarray(pixels, "RGB").save(path)
        images.append(Image.open(path).convert("RGB"))
    return images


inits = init_images(np.random.RandomState(2321))
emb = load_file(os.path.join(gold, "pipeline.safetensors"))
gen = torch.Generator().manual_seed(2322)
lat_shape = (2, 4, HEIGHT // 2, WIDTH // 2)
posterior_noise = torch.randn(lat_shape, generator=gen)
noise = torch.randn(lat_shape, generator=gen)
tensors = {"posterior_noise": posterior_noise, "noise": noise}
vae_module.randn_tensor = tiny_models.returning(posterior_noise)
img2img_module.randn_tensor = tiny_models.returning(noise)

vae = AutoencoderKL.from_pretrained(os.path.join(args.tiny_sdxl, "vae")).eval()
assert vae.config.force_upcast
unet = UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sdxl, "unet")).eval()
euler = EulerDiscreteScheduler.from_pretrained(os.path.join(args.tiny_sdxl, "scheduler"))
pipe = StableDiffusionXLImg2ImgPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None,
                                        tokenizer_2=None, unet=unet, scheduler=euler, requires_aesthetics_score=False,
                                        force_zeros_for_empty_prompt=True, add_watermarker=False)
pipe.set_progress_bar_config(disable=True)

# The UNet's time ids of each call, and the latents after add_noise.
unet_calls = []
unet_forward = unet.forward


def recording_forward(*a, **kw):
    unet_calls.append(kw["added_cond_kwargs"]["time_ids"].clone())
    return unet_forward(*a, **kw)


unet.forward = recording_forward


def run_case(case, scheduler, strength, images, extra):
    pipe.scheduler = scheduler
    starts = []
    orig_add_noise = scheduler.add_noise

    def add_noise(*a, **kw):
        r = orig_add_noise(*a, **kw)
        starts.append(r.clone())
        return r

    scheduler.add_noise = add_noise
    common = dict(prompt_embeds=emb["prompt_embeds"], negative_prompt_embeds=emb["negative_prompt_embeds"],
                  pooled_prompt_embeds=emb["pooled_prompt_embeds"],
                  negative_pooled_prompt_embeds=emb["negative_pooled_prompt_embeds"], image=images,
                  strength=strength, num_inference_steps=STEPS, guidance_scale=GUIDANCE, **extra)
    unet_calls.clear()
    with torch.no_grad():
        latents = pipe(output_type="latent", **common).images
        time_ids = unet_calls[0]
        image_out = pipe(output_type="np", **common).images
    t_start = STEPS - min(int(STEPS * strength), STEPS)  # get_timesteps (order 1)
    tensors[f"{case}.timesteps"] = scheduler.timesteps[t_start:].to(torch.float64)
    tensors[f"{case}.time_ids"] = time_ids
    tensors[f"{case}.latents_start"] = starts[0]
    tensors[f"{case}.latents_final"] = latents
    tensors[f"{case}.images"] = torch.from_numpy(image_out.copy()).to(torch.float32)
    del scheduler.add_noise
    print(case, "t_start", t_start, "timesteps", tensors[f"{case}.timesteps"].tolist(), "time_ids",
          time_ids[-1].tolist(), "latent scale", float(latents.abs().max()))


config = euler.config
run_case("euler_s0.5", EulerDiscreteScheduler.from_config(config), 0.5, inits, {})
run_case("euler_s0.75", EulerDiscreteScheduler.from_config(config), 0.75, inits, {})
run_case("euler_s0.75_one", EulerDiscreteScheduler.from_config(config), 0.75, [inits[0], inits[0]], {})
run_case("euler_s0.75_micro", EulerDiscreteScheduler.from_config(config), 0.75, inits, MICRO)
run_case("ddim_s0.75", DDIMScheduler.from_config(config), 0.75, inits, {})

tiny_models.save_tensors(tensors, os.path.join(gold, "img2img.safetensors"), provenance)
print("wrote", os.path.join(gold, "img2img.safetensors"))
