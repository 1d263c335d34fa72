#!/usr/bin/python3
"""Only-masked inpainting goldens: StableDiffusionInpaintPipeline(padding_mask_crop=...) (v0.31.0).

Usage (from the repository root, after make_inpaint_goldens.py):
    /usr/bin/python3 tools/goldens/make_inpaint_crop_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd] [--out tests/data/tiny-sd-inpaint]

Writes OUT/goldens/inpaint_crop.safetensors: tiny-sd's 4-channel UNet, PNDM, strength 0.75, 8
steps, guidance 7.5, the init images and masks of inpaint.safetensors with its injected noise
(noise, posterior_noise, masked_posterior_noise read from there), padding_mask_crop = 8:
    pad8.images (2, 64, 64, 3) float32 = the pipeline's PIL output / 255 (apply_overlay pastes the
                 crop back over the init image with the mask as alpha, in 8 bits)
    pad8.crop.<k> (4,) the crop box x1, y1, x2, y2 of mask k
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
from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel  # noqa: E402
from diffusers.image_processor import VaeImageProcessor  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

gold = os.path.join(args.out, "goldens")
tiny_goldens = os.path.join(args.tiny_sd, "goldens")
provenance = tiny_models.provenance("tools/goldens/make_inpaint_crop_goldens.py")
injected = load_file(os.path.join(gold, "inpaint.safetensors"))
masks = [Image.open(os.path.join(gold, f"mask_{k}.png")).convert("RGB") for k in range(2)]
inits = [Image.open(os.path.join(tiny_goldens, f"img2img_init_{k}.png")).convert("RGB") for k in range(2)]
embeds = load_file(os.path.join(tiny_goldens, "pipeline.safetensors"))
vae = AutoencoderKL.from_pretrained(os.path.join(args.tiny_sd, "vae")).eval()
unet = UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sd, "unet")).eval()
pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet,
                                      scheduler=PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler")),
                                      safety_checker=None, feature_extractor=None, requires_safety_checker=False)
pipe.set_progress_bar_config(disable=True)

tensors = {}
images = []
# diffusers crops with one box for the whole batch (the first mask's): one run per image.
for k in range(2):
    vae_queue = [injected["posterior_noise"][k:k + 1], injected["masked_posterior_noise"][k:k + 1]]
    vae_module.randn_tensor = tiny_models.popping(vae_queue)
    inpaint_module.randn_tensor = tiny_models.returning(injected["noise"][k:k + 1])
    out = pipe(prompt_embeds=embeds["prompt_embeds"][k:k + 1], negative_prompt_embeds=embeds["negative_prompt_embeds"][k:k + 1],
               image=inits[k], mask_image=masks[k], strength=0.75, num_inference_steps=8, guidance_scale=7.5,
               height=64, width=64, padding_mask_crop=8, output_type="pil").images[0]
    assert not vae_queue
    images.append(np.asarray(out, np.float32) / 255.0)
    tensors[f"pad8.crop.{k}"] = torch.tensor(VaeImageProcessor.get_crop_region(masks[k], 64, 64, pad=8))
    print("crop", k, tensors[f"pad8.crop.{k}"].tolist())
tensors["pad8.images"] = torch.from_numpy(np.stack(images))
tiny_models.save_tensors(tensors, os.path.join(gold, "inpaint_crop.safetensors"), provenance)
