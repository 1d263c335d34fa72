#!/usr/bin/python3
"""Inpainting with ControlNet: goldens from diffusers' StableDiffusionControlNetInpaintPipeline (v0.31.0).

Usage (from the repository root, after make_inpaint_goldens.py and make_controlnet_goldens.py):
    /usr/bin/python3 tools/goldens/make_controlnet_inpaint_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd]
        [--inpaint tests/data/tiny-sd-inpaint] [--controlnet tests/data/tiny-controlnet]
        [--out tests/data/tiny-controlnet-inpaint]

Writes into OUT:
  controlnet_9/   a ControlNet for tiny-sd-inpaint's 9-channel UNet: ControlNetModel with that UNet's
                  configuration but in_channels 4 (a ControlNet reads the 4 latent channels, not the
                  inpainting channels, as control_v11p_sd15_inpaint does), conditioning_embedding_out_channels
                  (16, 32), torch.manual_seed(4646), the zero-initialised modules re-initialised
                  (reset_parameters) so the residuals are not zero.
  goldens.safetensors:
    noise, posterior_noise, masked_posterior_noise (2, 4, 32, 32): what the pipeline's randn_tensor
        calls return (the noise of prepare_latents; the eps of the init image's and of the masked
        image's VAE posterior samples)
    <case>.timesteps (float64), <case>.keep (calls run, nets): diffusers' controlnet_keep,
    <case>.latents_final (2, 4, 32, 32) (after the last step and, for 4 channels, the blend),
    <case>.images (2, 64, 64, 3) (output_type="np")
  cases: 6 steps, guidance 7.5, tiny-sd goldens/pipeline.safetensors' prompt embeddings (2 prompts,
  one image each), init images tiny-sd/goldens/img2img_init_{0,1}.png, masks
  tiny-sd-inpaint/goldens/mask_{0,1}.png, control images tiny-controlnet/control_{0,1}.png (one per
  prompt) unless said otherwise:
    ch9_pndm_s1        9-channel UNet + controlnet_9, scale 0.8, PNDM, strength 1
    ch9_euler_s0.75    the same with Euler, strength 0.75, control_guidance_start 0.2, end 0.8
    ch4_pndm_s1        tiny-sd's 4-channel UNet (legacy blend) + tiny-controlnet's controlnet_a, scale 0.8
    ch4_multi_s0.75    tiny-sd's UNet + MultiControlNet [controlnet_a, controlnet_b], scales [1.0, 0.6],
                       start [0.0, 0.2], end [0.9, 0.7], images [control_2, control_0] (one per net),
                       PNDM, strength 0.75
    ch4_crop8          "only masked": tiny-sd's UNet + controlnet_a (scale 0.8), PNDM, strength 0.75,
                       padding_mask_crop 8 (the control image is cropped with the init image and mask);
                       one run per image (diffusers crops a batch with one box): only
                       ch4_crop8.images (2, 64, 64, 3) = the PIL output / 255 (pasted back in 8 bits)
"""
import argparse
import os

import tiny_models

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sd", default="tests/data/tiny-sd")
ap.add_argument("--inpaint", default="tests/data/tiny-sd-inpaint")
ap.add_argument("--controlnet", default="tests/data/tiny-controlnet")
ap.add_argument("--out", default="tests/data/tiny-controlnet-inpaint")
args = ap.parse_args()

tiny_models.setup(args.diffusers, args.shared_tools)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.pipelines.controlnet.pipeline_controlnet_inpaint as cn_inpaint_module  # noqa: E402
from diffusers import (AutoencoderKL, ControlNetModel, EulerDiscreteScheduler, PNDMScheduler,  # noqa: E402
                       StableDiffusionControlNetInpaintPipeline, UNet2DConditionModel)
from diffusers.pipelines.controlnet.multicontrolnet import MultiControlNetModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

out = args.out
os.makedirs(out, exist_ok=True)
provenance = tiny_models.provenance("tools/goldens/make_controlnet_inpaint_goldens.py")
tiny_goldens = os.path.join(args.tiny_sd, "goldens")

vae = AutoencoderKL.from_pretrained(os.path.join(args.tiny_sd, "vae")).eval()
unet4 = UNet2DConditionModel.from_pretrained(os.path.join(args.tiny_sd, "unet")).eval()
unet9 = UNet2DConditionModel.from_pretrained(os.path.join(args.inpaint, "unet")).eval()
cn_a = ControlNetModel.from_pretrained(os.path.join(args.controlnet, "controlnet_a")).eval()
cn_b = ControlNetModel.from_pretrained(os.path.join(args.controlnet, "controlnet_b")).eval()

# ---- a ControlNet for the 9-channel UNet: its configuration, 4 latent channels in ----
torch.manual_seed(4646)
cn9 = ControlNetModel.from_unet(unet9, conditioning_embedding_out_channels=(16, 32), load_weights_from_unet=False)
config = {k: v for k, v in cn9.config.items() if not k.startswith("_")}
config["in_channels"] = 4
torch.manual_seed(4646)
cn9 = ControlNetModel(**config)
tiny_models.wake_zero_modules(cn9)
cn9.eval().save_pretrained(os.path.join(out, "controlnet_9"), safe_serialization=True)
cn9 = ControlNetModel.from_pretrained(os.path.join(out, "controlnet_9")).eval()

inits = [Image.open(os.path.join(tiny_goldens, f"img2img_init_{k}.png")).convert("RGB") for k in range(2)]
masks = [Image.open(os.path.join(args.inpaint, "goldens", f"mask_{k}.png")).convert("RGB") for k in range(2)]
controls = [Image.open(os.path.join(args.controlnet, f"control_{k}.png")).convert("RGB") for k in range(3)]
embeds = load_file(os.path.join(tiny_goldens, "pipeline.safetensors"))

gen = torch.Generator().manual_seed(4747)
noise = torch.randn((2, 4, 32, 32), generator=gen)
posterior_noise = torch.randn((2, 4, 32, 32), generator=gen)
masked_posterior_noise = torch.randn((2, 4, 32, 32), generator=gen)
tensors = {"noise": noise, "posterior_noise": posterior_noise, "masked_posterior_noise": masked_posterior_noise}

vae_queue = []
vae_module.randn_tensor = tiny_models.popping(vae_queue)
cn_inpaint_module.randn_tensor = tiny_models.returning(noise)
base_sched = PNDMScheduler.from_pretrained(os.path.join(args.tiny_sd, "scheduler"))
STEPS = 6


def run(case, unet, controlnet, scheduler_cls, strength, control_image, **kw):
    pipe = StableDiffusionControlNetInpaintPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet,
                                                    controlnet=controlnet, scheduler=scheduler_cls.from_config(
                                                        base_sched.config),
                                                    safety_checker=None, feature_extractor=None,
                                                    requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    nine = unet.config.in_channels == 9
    vae_queue[:] = ([posterior_noise] if (strength < 1 or not nine) else []) + [masked_posterior_noise]
    finals = []

    def on_step_end(p, i, t, kwargs):
        finals.append(kwargs["latents"].clone())
        return {}

    with torch.no_grad():
        images = pipe(prompt_embeds=embeds["prompt_embeds"], negative_prompt_embeds=embeds["negative_prompt_embeds"],
                      image=inits, mask_image=masks, control_image=control_image, strength=strength,
                      num_inference_steps=STEPS, guidance_scale=7.5, height=64, width=64, output_type="np",
                      callback_on_step_end=on_step_end, **kw).images
    assert not vae_queue, "the pipeline drew fewer posterior samples than expected"
    t_start = STEPS - min(int(STEPS * strength), STEPS)
    timesteps = pipe.scheduler.timesteps[t_start * pipe.scheduler.order:]
    n = len(timesteps)
    starts = kw.get("control_guidance_start", 0.0)
    ends = kw.get("control_guidance_end", 1.0)
    starts = starts if isinstance(starts, list) else [starts]
    ends = ends if isinstance(ends, list) else [ends]
    keep = [[1.0 - float(i / n < s or (i + 1) / n > e) for s, e in zip(starts, ends)] for i in range(n)]
    tensors[f"{case}.timesteps"] = timesteps.to(torch.float64)
    tensors[f"{case}.keep"] = torch.tensor(keep, dtype=torch.float64)
    tensors[f"{case}.latents_final"] = finals[-1]
    tensors[f"{case}.images"] = torch.from_numpy(images)
    print(case, "calls", n, "keep", keep, "latent scale", float(finals[-1].abs().max()))


run("ch9_pndm_s1", unet9, cn9, PNDMScheduler, 1.0, [controls[0], controls[1]], controlnet_conditioning_scale=0.8)
run("ch9_euler_s0.75", unet9, cn9, EulerDiscreteScheduler, 0.75, [controls[0], controls[1]],
    controlnet_conditioning_scale=0.8, control_guidance_start=0.2, control_guidance_end=0.8)
run("ch4_pndm_s1", unet4, cn_a, PNDMScheduler, 1.0, [controls[0], controls[1]], controlnet_conditioning_scale=0.8)
run("ch4_multi_s0.75", unet4, MultiControlNetModel([cn_a, cn_b]), PNDMScheduler, 0.75, [controls[2], controls[0]],
    controlnet_conditioning_scale=[1.0, 0.6], control_guidance_start=[0.0, 0.2], control_guidance_end=[0.9, 0.7])



def run_crop(k):
    vae_queue[:] = [posterior_noise[k:k + 1], masked_posterior_noise[k:k + 1]]
    cn_inpaint_module.randn_tensor = tiny_models.returning(noise[k:k + 1])
    pipe = StableDiffusionControlNetInpaintPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet4,
                                                    controlnet=cn_a, scheduler=PNDMScheduler.from_config(
                                                        base_sched.config),
                                                    safety_checker=None, feature_extractor=None,
                                                    requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        image = pipe(prompt_embeds=embeds["prompt_embeds"][k:k + 1],
                     negative_prompt_embeds=embeds["negative_prompt_embeds"][k:k + 1], image=inits[k],
                     mask_image=masks[k], control_image=controls[k], strength=0.75, num_inference_steps=STEPS,
                     guidance_scale=7.5, height=64, width=64, padding_mask_crop=8, controlnet_conditioning_scale=0.8,
                     output_type="pil").images[0]
    assert not vae_queue
    return np.asarray(image, np.float32) / 255.0


tensors["ch4_crop8.images"] = torch.from_numpy(np.stack([run_crop(0), run_crop(1)]))

tiny_models.save_tensors(tensors, os.path.join(out, "goldens.safetensors"), provenance)
