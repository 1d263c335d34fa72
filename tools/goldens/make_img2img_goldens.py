#!/usr/bin/python3
"""Image-to-image goldens from diffusers' StableDiffusionImg2ImgPipeline on tests/data/tiny-sd.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_img2img_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd]
        [--out tests/data/tiny-sd/goldens]

Writes into OUT:
  img2img_init_0.png, img2img_init_1.png   two 64x64 RGB init images (fixed numpy seed), one per image
  img2img.safetensors:
    posterior_noise  (2, 4, 32, 32)  the eps of vae.encode(image).latent_dist.sample(generator)
    noise            (2, 4, 32, 32)  the noise prepare_latents adds with scheduler.add_noise
    <case>.timesteps       the timesteps the pipeline ran (after get_timesteps' cut)
    <case>.latents_start   (2, 4, 32, 32) the latents after add_noise (what the loop starts from)
    <case>.latents_final   (2, 4, 32, 32) output_type="latent"
    <case>.images          (2, 64, 64, 3) output_type="np"
  for <case> in pndm_s0.5, pndm_s0.75, euler_s0.5, euler_s0.75 (8 steps, guidance 7.5, prompt
  and negative embeddings = pipeline.safetensors' prompt_embeds / negative_prompt_embeds, text_encoder=None).
  The pipeline draws both random tensors from its generator with randn_tensor; this script
  replaces randn_tensor in the pipeline and VAE modules with functions returning the saved
  tensors, so a caller can inject exactly them.
  lanczos_src.png (67x45) and lanczos_<W>x<H>.png: PIL Image.resize(..., Image.LANCZOS) of it.
  img2img_add_noise.safetensors: every scheduler class (tiny-sd's scheduler config) after
    set_timesteps(10) and set_begin_index(4) (strength 0.6): original, noise (2, 4, 8, 8),
    <class>.timesteps (the cut grid), <class>.noisy = add_noise(original, noise, timesteps[:1]);
    LCMScheduler.set_timesteps(4, strength=s): lcm_s<s>.timesteps and lcm_s<s>.noisy.
"""
import argparse
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sd", default="tests/data/tiny-sd")
ap.add_argument("--out", default="tests/data/tiny-sd/goldens")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as img2img_module  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel, PNDMScheduler, StableDiffusionImg2ImgPipeline  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

out = args.out
os.makedirs(out, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_img2img_goldens.py")

# ---- add_noise of every scheduler class at an image-to-image start ----
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,  # noqa: E402
                       LCMScheduler, LMSDiscreteScheduler)
sched_config = PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler")).config
g = torch.Generator().manual_seed(2213)
original, added = torch.randn((2, 4, 8, 8), generator=g), torch.randn((2, 4, 8, 8), generator=g)
noise_tensors = {"original": original, "noise": added}
for cls in [PNDMScheduler, DDIMScheduler, LMSDiscreteScheduler, EulerDiscreteScheduler,
            EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler, LCMScheduler]:
    sch = cls.from_config(sched_config)
    sch.set_timesteps(10)
    t_start = 10 - min(int(10 * 0.6), 10)
    cut = sch.timesteps[t_start * sch.order:]
    if hasattr(sch, "set_begin_index"):
        sch.set_begin_index(t_start * sch.order)
    noise_tensors[f"{cls.__name__}.timesteps"] = cut.to(torch.float64)
    noise_tensors[f"{cls.__name__}.noisy"] = sch.add_noise(original, added, cut[:1])
for strength in (0.5, 1.0):
    sch = LCMScheduler.from_config(sched_config)
    sch.set_timesteps(4, strength=strength)
    noise_tensors[f"lcm_s{strength}.timesteps"] = sch.timesteps.to(torch.float64)
    noise_tensors[f"lcm_s{strength}.noisy"] = sch.add_noise(original, added, sch.timesteps[:1])
tiny_models.save_tensors(noise_tensors, os.path.join(out, "img2img_add_noise.safetensors"), provenance)

# ---- PIL Lanczos references ----
rng = np.random.RandomState(2211)
src = Image.fromarray(rng.randint(0, 256, size=(45, 67, 3), dtype=np.uint8), "RGB")
src.save(os.path.join(out, "lanczos_src.png"))
for w, h in [(32, 32), (80, 50), (64, 45), (67, 30)]:
    src.resize((w, h), Image.LANCZOS).save(os.path.join(out, f"lanczos_{w}x{h}.png"))

# ---- init images: smooth colour fields plus noise, so the VAE sees structure ----
yy, xx = np.mgrid[0:64, 0:64].astype(np.float64)
inits = []
for k in range(2):
    base = np.stack([128 + 100 * np.sin((xx + 9 * k) / 9.0), 128 + 100 * np.cos((yy - 5 * k) / 7.0),
                     128 + 60 * np.sin((xx + yy) / 13.0 + k)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 12, size=base.shape), 0, 255).round().astype(np.uint8)
    img = Image.fromarray(pixels, "RGB")
    img.save(os.path.join(out, f"img2img_init_{k}.png"))
    inits.append(Image.open(os.path.join(out, f"img2img_init_{k}.png")).convert("RGB"))

embeds = load_file(os.path.join(out, "pipeline.safetensors"))
prompt_embeds, negative_embeds = embeds["prompt_embeds"], embeds["negative_prompt_embeds"]

gen = torch.Generator().manual_seed(2212)
posterior_noise = torch.randn((2, 4, 32, 32), generator=gen)
noise = torch.randn((2, 4, 32, 32), generator=gen)
tensors = {"posterior_noise": posterior_noise, "noise": noise}
vae_module.randn_tensor = tiny_models.returning(posterior_noise)
img2img_module.randn_tensor = tiny_models.returning(noise)

pipe = StableDiffusionImg2ImgPipeline(
    vae=AutoencoderKL.from_pretrained(os.path.join(args.tiny_sd, "vae")).eval(), text_encoder=None, tokenizer=None,
    unet=UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sd, "unet")).eval(),
    scheduler=PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler")), safety_checker=None,
    feature_extractor=None, requires_safety_checker=False)
pipe.set_progress_bar_config(disable=True)
base_config = pipe.scheduler.config
for name, cls in [("pndm", PNDMScheduler), ("euler", EulerDiscreteScheduler)]:
    pipe.scheduler = cls.from_config(base_config)
    for strength in (0.5, 0.75):
        case = f"{name}_s{strength}"
        starts, seen = [], []

        orig_add_noise = pipe.scheduler.add_noise

        def add_noise(*a, **kw):
            r = orig_add_noise(*a, **kw)
            starts.append(r.clone())
            return r

        pipe.scheduler.add_noise = add_noise
        common = dict(prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds, image=inits,
                      strength=strength, num_inference_steps=8, guidance_scale=7.5)
        latents = pipe(output_type="latent", **common).images
        t_start = 8 - min(int(8 * strength), 8)  # get_timesteps (order 1)
        tensors[f"{case}.timesteps"] = pipe.scheduler.timesteps[t_start:].to(torch.float64)
        tensors[f"{case}.latents_start"] = starts[0]
        tensors[f"{case}.latents_final"] = latents
        images = pipe(output_type="np", **common).images
        tensors[f"{case}.images"] = torch.from_numpy(images)
        del pipe.scheduler.add_noise
        print(case, "t_start", t_start, "timesteps", tensors[f"{case}.timesteps"].tolist(),
              "latent scale", float(latents.abs().max()))

tiny_models.save_tensors(tensors, os.path.join(out, "img2img.safetensors"), provenance)
