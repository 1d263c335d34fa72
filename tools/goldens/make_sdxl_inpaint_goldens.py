#!/usr/bin/python3
"""SDXL inpainting goldens from diffusers' StableDiffusionXLInpaintPipeline (v0.31.0).

Usage (from the repository root, after make_tiny_sdxl.py and make_sdxl_img2img_goldens.py):
    /usr/bin/python3 tools/goldens/make_sdxl_inpaint_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sdxl tests/data/tiny-sdxl] [--out tests/data/tiny-sdxl-inpaint]

Writes OUT (a diffusers folder whose text encoders, tokenizers, VAE and scheduler are relative
symlinks to tiny-sdxl's, so only the UNet is new):
  unet/            a random UNet2DConditionModel like tiny-sdxl's (text_time, SDXL's block layout)
                   but in_channels 9 and layers_per_block 1 (torch.manual_seed(2331), diffusers'
                   default initialisation), as make_inpaint_goldens.py made tiny-sd-inpaint's
  model_index.json StableDiffusionXLInpaintPipeline
  goldens/mask_0.png, mask_1.png   32x64 (W x H) grey masks (R = G = B): white = repaint, with grey
                   levels 127 and 128 at edges (binarised to 0 and 1)
  goldens/inpaint.safetensors:
    noise, posterior_noise, masked_posterior_noise  (2, 4, 32, 16): what the pipeline's randn_tensor
        calls return (the noise of prepare_latents; the eps of the init image's posterior sample;
        the eps of the masked image's posterior sample)
    mask_latent   (2, 1, 32, 16) torch's nearest interpolation of the binarised masks
    <case>.timesteps, <case>.time_ids (4, 6: the first UNet call's), <case>.unet_input0 (4, C, 32, 16:
        the first UNet call's input), <case>.latents_final (2, 4, 32, 16), <case>.images (2, 64, 32, 3)
    pad2.images (2, 64, 32, 3)  padding_mask_crop=2 runs of the 4-channel blend (Euler, strength 0.75),
        one per image (diffusers crops a batch with one box): the PIL output / 255
    pad2.crop.<k> (4,) int64  get_crop_region(mask_k, 32, 64, pad=2) = x1, y1, x2, y2
  cases (8 steps, guidance 5, the prompt / negative / pooled embeddings of tiny-sdxl's
  pipeline.safetensors, height 64, width 32, the folder's Euler, init images
  tiny-sdxl/goldens/img2img_init_{0,1}.png, one per image unless said):
    ch9_euler_s1, ch9_euler_s0.75         the 9-channel UNet above
    ch4_euler_s1, ch4_euler_s0.75         tiny-sdxl's 4-channel UNet (diffusers' legacy blend)
    ch4_euler_s0.75_one                   init image 0 and mask 0 for both images
"""
import argparse
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sdxl", default="tests/data/tiny-sdxl")
ap.add_argument("--out", default="tests/data/tiny-sdxl-inpaint")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.pipelines.stable_diffusion_xl.pipeline_stable_diffusion_xl_inpaint as inpaint_module  # noqa: E402
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLInpaintPipeline,  # noqa: E402
                       UNet2DConditionModel)
from diffusers.image_processor import VaeImageProcessor  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

WIDTH, HEIGHT, STEPS, GUIDANCE = 32, 64, 8, 5.0
out, tiny = args.out, args.tiny_sdxl
gold = os.path.join(out, "goldens")
os.makedirs(gold, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_sdxl_inpaint_goldens.py")
tiny_goldens = os.path.join(tiny, "goldens")

# ---- the model folder: a new 9-channel UNet, the rest shared with tiny-sdxl ----
unet9 = tiny_models.random_unet_like(os.path.join(tiny, "unet"), 2331, in_channels=9, layers_per_block=1)
tiny_models.write_model_folder(tiny, out, unet9,
                               ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae", "scheduler"),
                               "StableDiffusionXLInpaintPipeline", requires_aesthetics_score=False)

# ---- masks ----
yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
m0 = np.zeros((HEIGHT, WIDTH), np.uint8)
m0[10:42, 6:24] = 255
m0[10:42, 5] = 128   # binarised to 1
m0[10:42, 24] = 127  # binarised to 0
m0[42, 6:24] = 200
m1 = np.where((xx - 18) ** 2 + (yy - 40) ** 2 <= 11 ** 2, 255, 0).astype(np.uint8)
m1[(xx - 18) ** 2 + (yy - 40) ** 2 == 12 ** 2] = 100
masks = []
for k, m in enumerate([m0, m1]):
    Image.fromarray(np.stack([m] * 3, -1), "RGB").save(os.path.join(gold, f"mask_{k}.png"))
    masks.append(Image.open(os.path.join(gold, f"mask_{k}.png")).convert("RGB"))
inits = [Image.open(os.path.join(tiny_goldens, f"img2img_init_{k}.png")).convert("RGB") for k in range(2)]
assert inits[0].size == (WIDTH, HEIGHT), inits[0].size

emb = load_file(os.path.join(tiny_goldens, "pipeline.safetensors"))
gen = torch.Generator().manual_seed(2332)
lat_shape = (2, 4, HEIGHT // 2, WIDTH // 2)
noise = torch.randn(lat_shape, generator=gen)
posterior_noise = torch.randn(lat_shape, generator=gen)
masked_posterior_noise = torch.randn(lat_shape, generator=gen)
tensors = {"noise": noise, "posterior_noise": posterior_noise, "masked_posterior_noise": masked_posterior_noise}

vae_queue, pipe_queue = [], []
vae_module.randn_tensor = tiny_models.popping(vae_queue)
inpaint_module.randn_tensor = tiny_models.popping(pipe_queue)

vae = AutoencoderKL.from_pretrained(os.path.join(tiny, "vae")).eval()
unet4 = UNet2DConditionModel.from_pretrained(os.path.join(tiny, "unet")).eval()
euler = EulerDiscreteScheduler.from_pretrained(os.path.join(tiny, "scheduler"))

bin_masks = np.stack([(np.asarray(m.convert("L"), np.float32) / 255.0 >= 0.5).astype(np.float32) for m in masks])
tensors["mask_latent"] = torch.nn.functional.interpolate(torch.from_numpy(bin_masks)[:, None],
                                                         size=(HEIGHT // 2, WIDTH // 2))

# The first UNet call's input and time ids.
unet_calls = []


def record(unet):
    forward = unet.forward

    def recording_forward(sample, *a, **kw):
        unet_calls.append((sample.clone(), kw["added_cond_kwargs"]["time_ids"].clone()))
        return forward(sample, *a, **kw)

    unet.forward = recording_forward


record(unet9)
record(unet4)


def pipeline(unet):
    pipe = StableDiffusionXLInpaintPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None,
                                            tokenizer_2=None, unet=unet,
                                            scheduler=EulerDiscreteScheduler.from_config(euler.config),
                                            requires_aesthetics_score=False, force_zeros_for_empty_prompt=True,
                                            add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def embeds(rows):
    return dict(prompt_embeds=emb["prompt_embeds"][rows], negative_prompt_embeds=emb["negative_prompt_embeds"][rows],
                pooled_prompt_embeds=emb["pooled_prompt_embeds"][rows],
                negative_pooled_prompt_embeds=emb["negative_pooled_prompt_embeds"][rows])


def run_case(case, unet, strength, images, mask_images):
    pipe = pipeline(unet)
    nine = unet is unet9
    vae_queue[:] = ([posterior_noise] if (strength < 1 or not nine) else []) + [masked_posterior_noise]
    pipe_queue[:] = [noise]
    finals = []

    def on_step_end(p, i, t, kw):
        finals.append(kw["latents"].clone())
        return {}

    unet_calls.clear()
    with torch.no_grad():
        images_out = pipe(image=images, mask_image=mask_images, strength=strength, num_inference_steps=STEPS,
                          guidance_scale=GUIDANCE, height=HEIGHT, width=WIDTH, output_type="np",
                          callback_on_step_end=on_step_end, **embeds(slice(0, 2))).images
    assert not vae_queue and not pipe_queue, "the pipeline drew other random tensors than expected"
    t_start = STEPS - min(int(STEPS * strength), STEPS)
    tensors[f"{case}.timesteps"] = pipe.scheduler.timesteps[t_start:].to(torch.float64)
    tensors[f"{case}.unet_input0"], tensors[f"{case}.time_ids"] = unet_calls[0]
    tensors[f"{case}.latents_final"] = finals[-1]
    tensors[f"{case}.images"] = torch.from_numpy(images_out.copy()).to(torch.float32)
    print(case, "calls", len(unet_calls), "time_ids", unet_calls[0][1][-1].tolist(), "latent scale",
          float(finals[-1].abs().max()))


run_case("ch9_euler_s1", unet9, 1.0, inits, masks)
run_case("ch9_euler_s0.75", unet9, 0.75, inits, masks)
run_case("ch4_euler_s1", unet4, 1.0, inits, masks)
run_case("ch4_euler_s0.75", unet4, 0.75, inits, masks)
run_case("ch4_euler_s0.75_one", unet4, 0.75, [inits[0], inits[0]], [masks[0], masks[0]])

# ---- only masked: padding_mask_crop=2, one run per image ----
crop_images = []
for k in range(2):
    pipe = pipeline(unet4)
    vae_queue[:] = [posterior_noise[k:k + 1], masked_posterior_noise[k:k + 1]]
    pipe_queue[:] = [noise[k:k + 1]]
    with torch.no_grad():
        image = pipe(image=inits[k], mask_image=masks[k], strength=0.75, num_inference_steps=STEPS,
                     guidance_scale=GUIDANCE, height=HEIGHT, width=WIDTH, padding_mask_crop=2, output_type="pil",
                     **embeds(slice(k, k + 1))).images[0]
    assert not vae_queue and not pipe_queue
    crop_images.append(np.asarray(image, np.float32) / 255.0)
    tensors[f"pad2.crop.{k}"] = torch.tensor(VaeImageProcessor.get_crop_region(masks[k], WIDTH, HEIGHT, pad=2))
    print("pad2 crop", k, tensors[f"pad2.crop.{k}"].tolist())
    assert tensors[f"pad2.crop.{k}"].tolist() != [0, 0, WIDTH, HEIGHT], "the crop should be smaller than the image"
tensors["pad2.images"] = torch.from_numpy(np.stack(crop_images))

tiny_models.save_tensors(tensors, os.path.join(gold, "inpaint.safetensors"), provenance)
print("wrote", out)
