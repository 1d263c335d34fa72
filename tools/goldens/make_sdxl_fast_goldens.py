#!/usr/bin/python3
"""The tiny SDXL with a tiny autoencoder (TAESDXL) and as SDXL-Turbo: reference runs of diffusers'
StableDiffusionXLPipeline (tests/data/tiny-taesdxl, tests/data/tiny-sdxl-turbo).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_sdxl_fast_goldens.py [--sdxl tests/data/tiny-sdxl]
        [--taesdxl-out tests/data/tiny-taesdxl] [--turbo-out tests/data/tiny-sdxl-turbo]
        [--diffusers /work/diffusers-v0.31.0] [--shared-tools /work/shared/tools]

Writes (fixed seeds, float32, CPU, one thread; a rerun writes the same bytes):
  TAESDXL/config.json, diffusion_pytorch_model.safetensors
        a tiny random AutoencoderTiny for SDXL latents (TAESDXL has TAESD's architecture and its own weights):
        16 channels, num_encoder_blocks (1, 3, 3, 3), num_decoder_blocks (3, 3, 3, 1), seed 2310; weights redrawn
        He-normal as tools/goldens/make_taesd_goldens.py does (activations of order one through ~40 convolutions)
  TAESDXL/goldens/pipeline_tiny_sdxl.safetensors
        StableDiffusionXLPipeline(vae=<this AutoencoderTiny>, unet, scheduler of tiny-sdxl), tiny-sdxl's pipeline
        goldens' prompt/negative embeddings and latents_init, 128 x 128 (16 x 16 latents at TAESD's 8x), 5 Euler
        steps, guidance 5: latents_final (output_type="latent") and images (output_type="np"). The SDXL pipeline
        divides the latents by vae.config.scaling_factor, 1.0 for AutoencoderTiny: the script checks that the images
        are exactly postprocess(taesd.decode(latents_final)).
  TURBO/scheduler/scheduler_config.json
        stabilityai/sdxl-turbo's scheduler: EulerAncestralDiscreteScheduler, epsilon, scaled_linear 0.00085-0.012,
        steps_offset 1, timestep_spacing "trailing"
  TURBO/goldens/pipeline.safetensors
        StableDiffusionXLPipeline(tiny-sdxl's unet and vae, that scheduler) at guidance 0 (one UNet pass, no
        negative), tiny-sdxl's prompt embeddings: case n1 (1 step, 48 x 48 — not the default size, so the time ids
        follow it) and n4 (4 steps, 32 x 32). The scheduler's noise: randn_tensor in diffusers'
        scheduling_euler_ancestral_discrete module is replaced by a function returning tensors drawn beforehand
        (<case>.step_noise, one per step, seed 2330 + case); with one step sigma_up is 0 and the noise does not count.
"""
import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--sdxl", default="tests/data/tiny-sdxl")
ap.add_argument("--taesdxl-out", default="tests/data/tiny-taesdxl")
ap.add_argument("--turbo-out", default="tests/data/tiny-sdxl-turbo")
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ARGS = ap.parse_args()

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, ARGS.shared_tools)
import diffusers_env  # noqa: E402

diffusers_env.setup(ARGS.diffusers)
import torch  # noqa: E402

torch.set_num_threads(1)
import diffusers  # noqa: E402
from diffusers import (AutoencoderKL, AutoencoderTiny, EulerAncestralDiscreteScheduler,  # noqa: E402
                       EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel)
from diffusers.image_processor import VaeImageProcessor  # noqa: E402
import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_a_module  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

TAESDXL_SEED, TURBO_LATENTS_SEED, TURBO_NOISE_SEED = 2310, 2320, 2330
CHANNELS = 16
META = {"diffusers": diffusers.__version__, "torch": torch.__version__,
        "made_by": "tools/goldens/make_sdxl_fast_goldens.py"}


def save(tensors, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=META)


def make_taesdxl():
    torch.manual_seed(TAESDXL_SEED)
    vae = AutoencoderTiny(encoder_block_out_channels=(CHANNELS,) * 4, decoder_block_out_channels=(CHANNELS,) * 4,
                          latent_channels=4, num_encoder_blocks=(1, 3, 3, 3), num_decoder_blocks=(3, 3, 3, 1))
    gen = torch.Generator().manual_seed(TAESDXL_SEED + 1)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith(".weight"):
                std = (2.0 / p[0].numel()) ** 0.5 * (0.3 if ".conv.4." in name else 1.0)
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        vae.decoder.layers[-1].weight.mul_(0.1)
        vae.decoder.layers[-1].bias.fill_(0.5)
    return vae.eval()


def sdxl_parts():
    unet = UNet2DConditionModel.from_pretrained(os.path.join(ARGS.sdxl, "unet")).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(ARGS.sdxl, "vae")).eval()
    goldens = load_file(os.path.join(ARGS.sdxl, "goldens", "pipeline.safetensors"))
    return unet, vae, goldens


def pipeline(unet, vae, scheduler):
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None, tokenizer_2=None,
                                     unet=unet, scheduler=scheduler, force_zeros_for_empty_prompt=True,
                                     add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def taesdxl_goldens(unet, g):
    out = ARGS.taesdxl_out
    taesd = make_taesdxl()
    taesd.save_pretrained(out, safe_serialization=True)
    assert taesd.config.scaling_factor == 1.0
    scheduler = EulerDiscreteScheduler.from_pretrained(os.path.join(ARGS.sdxl, "scheduler"))
    pipe = pipeline(unet, taesd, scheduler)
    assert pipe.vae_scale_factor == 8
    args = dict(prompt_embeds=g["prompt_embeds"], pooled_prompt_embeds=g["pooled_prompt_embeds"],
                negative_prompt_embeds=g["negative_prompt_embeds"],
                negative_pooled_prompt_embeds=g["negative_pooled_prompt_embeds"], latents=g["latents_init"].clone(),
                num_inference_steps=5, guidance_scale=5.0, height=128, width=128)
    with torch.no_grad():
        final = pipe(output_type="latent", **args).images
        images = torch.from_numpy(pipe(output_type="np", **args).images)
        sample = taesd.decode(final / 1.0, return_dict=False)[0]
    direct = VaeImageProcessor(vae_scale_factor=8).postprocess(sample, output_type="np")
    assert torch.equal(torch.from_numpy(direct), images), "the SDXL pipeline's decode is not taesd.decode(latents)"
    save({"latents_init": g["latents_init"], "latents_final": final, "images": images},
         os.path.join(out, "goldens", "pipeline_tiny_sdxl.safetensors"))
    inside = ((images > 0) & (images < 1)).float().mean().item()
    return [f"TAESDXL pipeline: latents_final {list(final.shape)} max |x| {final.abs().max():.3f}, images "
            f"{list(images.shape)}, inside (0,1) {100 * inside:.1f} %"]


class InjectedNoise:
    """Stands in for randn_tensor in diffusers' Euler ancestral module: returns prepared tensors in order."""

    def __init__(self):
        self.queue, self.calls = [], 0

    def __call__(self, shape, generator=None, device=None, dtype=None, layout=None):
        noise = self.queue[self.calls]
        assert tuple(shape) == tuple(noise.shape), (shape, noise.shape)
        self.calls += 1
        return noise.clone()


def turbo_scheduler():
    # stabilityai/sdxl-turbo's scheduler/scheduler_config.json settings (the class defaults otherwise).
    return EulerAncestralDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                           num_train_timesteps=1000, prediction_type="epsilon", steps_offset=1,
                                           timestep_spacing="trailing")


def turbo_goldens(unet, vae, g):
    out = ARGS.turbo_out
    scheduler = turbo_scheduler()
    scheduler.save_pretrained(os.path.join(out, "scheduler"))
    injected = InjectedNoise()
    euler_a_module.randn_tensor = injected
    pipe = pipeline(unet, vae, scheduler)
    goldens = {"prompt_embeds": g["prompt_embeds"], "pooled_prompt_embeds": g["pooled_prompt_embeds"]}
    stats = []
    for index, (case, steps, size) in enumerate((("n1", 1, 48), ("n4", 4, 32))):
        h = size // pipe.vae_scale_factor
        latents = torch.randn([2, 4, h, h], generator=torch.Generator().manual_seed(TURBO_LATENTS_SEED + index))
        noise_gen = torch.Generator().manual_seed(TURBO_NOISE_SEED + index)
        noise = [torch.randn([2, 4, h, h], generator=noise_gen) for _ in range(steps)]
        steps_seen = []

        def on_step_end(p, i, t, kw):
            steps_seen.append(kw["latents"].detach().clone())
            return {}

        images = {}
        for kind in ("latent", "np"):
            injected.queue, injected.calls = noise, 0
            with torch.no_grad():
                r = pipe(prompt_embeds=g["prompt_embeds"], pooled_prompt_embeds=g["pooled_prompt_embeds"],
                         num_inference_steps=steps, guidance_scale=0.0, latents=latents.clone(), height=size,
                         width=size, output_type=kind, callback_on_step_end=on_step_end).images
            assert injected.calls == steps, f"{case}: the scheduler drew {injected.calls} noises in {steps} steps"
            images[kind] = torch.as_tensor(r)
        assert not pipe.do_classifier_free_guidance
        goldens.update({f"{case}.latents_init": latents, f"{case}.step_noise": torch.stack(noise),
                        f"{case}.timesteps": pipe.scheduler.timesteps.clone(),
                        f"{case}.init_noise_sigma": torch.tensor([float(pipe.scheduler.init_noise_sigma)]),
                        f"{case}.latents_final": images["latent"], f"{case}.images": images["np"]})
        stats.append(f"{case}: {steps} step(s), {size} x {size}, timesteps {pipe.scheduler.timesteps.tolist()}, "
                     f"init_noise_sigma {float(pipe.scheduler.init_noise_sigma):.4f}, image mean "
                     f"{float(images['np'].mean()):.4f}")
        assert torch.equal(steps_seen[steps - 1], images["latent"])
    save(goldens, os.path.join(out, "goldens", "pipeline.safetensors"))
    return stats


def main():
    unet, vae, g = sdxl_parts()
    stats = taesdxl_goldens(unet, g) + turbo_goldens(unet, vae, g)
    print("\n".join(stats))  # (the data folders' READMEs quote these)


if __name__ == "__main__":
    main()
