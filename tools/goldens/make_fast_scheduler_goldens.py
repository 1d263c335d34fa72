#!/usr/bin/python3
"""Scheduler goldens for issue #20 (LCM, Euler ancestral, every timestep_spacing), computed by
diffusers 0.31 (torch, CPU, float32, one thread).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_fast_scheduler_goldens.py \
        tests/data/tiny-sd/scheduler/scheduler_config.json tests/data/fast-schedulers/schedulers.safetensors

Every scheduler class is built as `Cls.from_config(config)` where config is the tiny-sd
scheduler_config.json (SD 1.x betas, steps_offset 1) without its _class_name, plus
`timestep_spacing` set to each of leading / linspace / trailing.

Stored per class (pndm ddim lms dpmpp2m euler euler_a lcm), spacing and step count n:
  <cls>.<spacing>.n<n>.timesteps         scheduler.timesteps after set_timesteps(n) (int64 or f32)
  <cls>.<spacing>.n<n>.sigmas            scheduler.sigmas (classes that have them), f32
  <cls>.<spacing>.n<n>.init_noise_sigma  float(scheduler.init_noise_sigma), f64 [1]
for n in GRID_STEPS, and for the trajectories (TRAJECTORIES below):
  <...>.samples        [calls + 1, *SHAPE] f32: samples[0] = initial_latent * init_noise_sigma,
                       samples[k + 1] = step k's prev_sample
  <...>.model_inputs   [calls, *SHAPE]  scheduler.scale_model_input(samples[k], t_k)
  <...>.model_outputs  [calls, *SHAPE]  the stand-in model (below) of the model input
  <...>.pred_original  [calls, *SHAPE]  pred_original_sample (LCM: `denoised`), where the class returns it
  <...>.noise          [calls, *SHAPE]  the noise step k used (LCM, Euler ancestral)
plus `initial_latent` [*SHAPE] (torch.randn, seed 20).

The stand-in model is the tiny-sd goldens' one: model_input * 0.1f + (float)(0.01 * cos(t / 100))
with t the timestep as stored (converted to a Python float).

Noise: LCMScheduler.step and EulerAncestralDiscreteScheduler.step draw their noise with
`randn_tensor` imported into their modules. This script replaces that name in both modules with a
function that returns the next tensor of a list drawn beforehand (torch.randn, seed 1000 + run
index) and stores the list, so the C++ test can inject exactly the noise diffusers used. Step k of a
run uses noise[k]; LCM draws none on its last step (noise[n-1] is stored but unused) and Euler
ancestral multiplies its last draw by sigma_up = 0.
"""
import json
import math
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import diffusers  # noqa: E402
import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_a_module  # noqa: E402
import diffusers.schedulers.scheduling_lcm as lcm_module  # noqa: E402
from diffusers import (  # noqa: E402
    AutoencoderKL,
    DDIMScheduler,
    DPMSolverMultistepScheduler,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    LCMScheduler,
    LMSDiscreteScheduler,
    PNDMScheduler,
    StableDiffusionPipeline,
    UNet2DConditionModel,
)

torch.set_num_threads(1)
diffusers.utils.logging.set_verbosity_error()  # from_config warns about the keys a class lacks

CLASSES = {
    "pndm": PNDMScheduler,
    "ddim": DDIMScheduler,
    "lms": LMSDiscreteScheduler,
    "dpmpp2m": DPMSolverMultistepScheduler,
    "euler": EulerDiscreteScheduler,
    "euler_a": EulerAncestralDiscreteScheduler,
    "lcm": LCMScheduler,
}
SPACINGS = ["leading", "linspace", "trailing"]
GRID_STEPS = [1, 2, 3, 4, 5, 8, 25]
SHAPE = (1, 4, 8, 8)
TINY_SD_PIPELINE_STEPS = 5
# (class, spacing, n): one trajectory per class and spacing at 4 steps, and LCM / Euler ancestral
# at 1, 2, 4 and 8 steps with every spacing.
TRAJECTORIES = sorted(
    {(c, s, 4) for c in CLASSES for s in SPACINGS}
    | {(c, s, n) for c in ("lcm", "euler_a") for s in SPACINGS for n in (1, 2, 4, 8)}
)


class InjectedNoise:
    """Stands in for diffusers.utils.torch_utils.randn_tensor: returns prepared tensors in order."""

    def __init__(self):
        self.queue = []
        self.calls = 0

    def __call__(self, shape, generator=None, device=None, dtype=None, layout=None):
        assert tuple(shape) == SHAPE, shape
        noise = self.queue[self.calls]
        self.calls += 1
        return noise.to(dtype=dtype) if dtype is not None else noise.clone()


INJECTED = InjectedNoise()
lcm_module.randn_tensor = INJECTED
euler_a_module.randn_tensor = INJECTED


def stand_in_model(model_input, t):
    offset = torch.tensor(0.01 * math.cos(float(t) / 100), dtype=torch.float32)
    return model_input * 0.1 + offset


def make(name, base_config, spacing):
    return CLASSES[name].from_config(dict(base_config, timestep_spacing=spacing))


def record_grid(out, key, s):
    """Stores scheduler `s`'s grid (set_timesteps done): <key>.timesteps, .sigmas (classes that have
    them) and .init_noise_sigma."""
    out[key + ".timesteps"] = s.timesteps.clone()
    if hasattr(s, "sigmas"):
        out[key + ".sigmas"] = s.sigmas.to(torch.float32).clone()
    out[key + ".init_noise_sigma"] = torch.tensor([float(s.init_noise_sigma)], dtype=torch.float64)


def grid(out, name, base_config, spacing, n):
    s = make(name, base_config, spacing)
    s.set_timesteps(n)
    record_grid(out, f"{name}.{spacing}.n{n}", s)


def base_config_of(config_path):
    """A scheduler_config.json as Cls.from_config takes it here: without its _class_name and the other _ keys."""
    with open(config_path) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def initial_latent():
    """The trajectories' initial latent (torch.randn, seed 20)."""
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(20), dtype=torch.float32)


def save_goldens(tensors, path, generator, **metadata):
    """Writes `tensors` (made contiguous) with their provenance: the generating script, diffusers' and
    torch's versions, then `metadata` in order."""
    meta = {"generator": generator, "diffusers": diffusers.__version__, "torch": torch.__version__, **metadata}
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=meta)


def tiny_sd_pipeline_runs(tiny_sd, schedulers, before_call=None, after_call=None, call_args=None):
    """diffusers' StableDiffusionPipeline on tiny-sd (its UNet and VAE; 5 steps, guidance 7.5) given the
    tiny-sd pipeline goldens' prompt and negative prompt embeddings and initial latents, once per
    (name, scheduler) of `schedulers` for each output type: <name>.latents_final, <name>.images and
    <name>.timesteps. before_call(name) / after_call(name) run around each pipeline call;
    call_args[name] (a dict) adds arguments to that name's pipeline calls. Returns the tensors and
    tiny-sd's goldens."""
    g = load_file(os.path.join(tiny_sd, "goldens", "pipeline.safetensors"))
    unet = UNet2DConditionModel.from_pretrained(os.path.join(tiny_sd, "unet")).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(tiny_sd, "vae")).eval()
    out = {}
    for name, scheduler in schedulers.items():
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet, scheduler=scheduler,
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)
        for kind, key in (("latent", "latents_final"), ("np", "images")):
            if before_call:
                before_call(name)
            with torch.no_grad():
                r = pipe(prompt_embeds=g["prompt_embeds"], negative_prompt_embeds=g["negative_prompt_embeds"],
                         num_inference_steps=TINY_SD_PIPELINE_STEPS, guidance_scale=7.5,
                         latents=g["latents_init"].clone(), output_type=kind, height=64, width=64,
                         **(call_args or {}).get(name, {})).images
            if after_call:
                after_call(name)
            out[f"{name}.{key}"] = torch.as_tensor(r).contiguous()
        out[f"{name}.timesteps"] = pipe.scheduler.timesteps.clone()
    return out, g


def record_trajectory(out, key, s, initial):
    """Runs scheduler `s` (set_timesteps done) from initial * init_noise_sigma with the stand-in model
    and stores <key>.samples, .model_inputs, .model_outputs and .pred_original (LCM: `denoised`)."""
    x = initial * s.init_noise_sigma
    samples, inputs, outputs, preds = [x], [], [], []
    for t in s.timesteps:
        model_input = s.scale_model_input(x, t)
        model_output = stand_in_model(model_input, t)
        result = s.step(model_output, t, x)
        x = result.prev_sample
        inputs.append(model_input)
        outputs.append(model_output)
        samples.append(x)
        pred = getattr(result, "denoised", None)
        if pred is None:
            pred = getattr(result, "pred_original_sample", None)
        if pred is not None:
            preds.append(pred)
    out[key + ".samples"] = torch.stack(samples).reshape(len(samples), *initial.shape).contiguous()
    out[key + ".model_inputs"] = torch.stack(inputs).contiguous()
    out[key + ".model_outputs"] = torch.stack(outputs).contiguous()
    if preds:
        out[key + ".pred_original"] = torch.stack(preds).contiguous()


def trajectory(out, name, base_config, spacing, n, initial, run_index):
    s = make(name, base_config, spacing)
    s.set_timesteps(n)
    key = f"{name}.{spacing}.n{n}"
    gen = torch.Generator().manual_seed(1000 + run_index)
    noise = [torch.randn(SHAPE, generator=gen, dtype=torch.float32) for _ in range(len(s.timesteps))]
    INJECTED.queue, INJECTED.calls = noise, 0
    record_trajectory(out, key, s, initial)
    if name in ("lcm", "euler_a"):
        out[key + ".noise"] = torch.stack(noise).contiguous()
        expected_calls = n - 1 if name == "lcm" else n
        assert INJECTED.calls == expected_calls, (key, INJECTED.calls)


def main(config_path, out_path):
    base_config = base_config_of(config_path)
    out = {}
    for name in CLASSES:
        for spacing in SPACINGS:
            for n in GRID_STEPS:
                grid(out, name, base_config, spacing, n)
    initial = initial_latent()
    out["initial_latent"] = initial
    for run_index, (name, spacing, n) in enumerate(TRAJECTORIES):
        trajectory(out, name, base_config, spacing, n, initial, run_index)
    save_goldens(out, out_path, "tools/goldens/make_fast_scheduler_goldens.py",
                 base_config=json.dumps(base_config, sort_keys=True),
                 trajectories=json.dumps([list(t) for t in TRAJECTORIES]))
    print(f"wrote {len(out)} tensors to {out_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
