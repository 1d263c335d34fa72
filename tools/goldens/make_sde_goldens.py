#!/usr/bin/python3
"""DPM++ 2M SDE goldens (DPMSolverMultistepScheduler with algorithm_type "sde-dpmsolver++"),
computed by diffusers 0.31 (torch, CPU, float32, one thread).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_sde_goldens.py tests/data/tiny-sd tests/data/sde-dpmsolver

1. Schedulers (sde.safetensors): `DPMSolverMultistepScheduler.from_config(config)`, config being
   tiny-sd's scheduler_config.json (SD 1.x betas, steps_offset 1) without its _class_name, plus
   `algorithm_type="sde-dpmsolver++"`, `timestep_spacing` leading / linspace / trailing and the
   variant's settings (VARIANTS: second order midpoint (the default), heun, first order, Karras
   sigmas, final_sigmas_type "sigma_min", v-prediction). Per (variant, spacing, n) in TRAJECTORIES:
     <v>.<spacing>.n<n>.timesteps, .sigmas
     <v>.<spacing>.n<n>.samples / .model_inputs / .model_outputs / .pred_original / .noise
   with make_fast_scheduler_goldens.py's stand-in model (model_input * 0.1f +
   (float)(0.01 * cos(t / 100))) and initial latent (`initial_latent`, torch.randn, seed 20).
2. The pipeline (pipeline.safetensors): diffusers' StableDiffusionPipeline on tiny-sd (its UNet
   and VAE; 5 steps, guidance 7.5) given the tiny-sd pipeline goldens' prompt and negative prompt
   embeddings and initial latents, with the default SDE scheduler and with Karras sigmas
   (`<v>.latents_final`, `<v>.images`, `<v>.timesteps`, `<v>.noise` [steps, 1, 4, 8, 8]).
Noise: DPMSolverMultistepScheduler.step draws its noise with `randn_tensor` imported into its
module on every step (the last one too, where sigma_t = 0 multiplies it by 0). This script
replaces that name with a function returning the next tensor of a list drawn beforehand
(torch.randn, seed 3000 + run index) and stores the list, so the C++ tests inject the same noise.
"""
import json
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")

import numpy  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fast_scheduler_goldens import (  # noqa: E402  (the same stand-in model, loop, latent and pipeline)
    TINY_SD_PIPELINE_STEPS,
    base_config_of,
    initial_latent,
    record_trajectory,
    save_goldens,
    tiny_sd_pipeline_runs,
)

import diffusers  # noqa: E402
import diffusers.schedulers.scheduling_dpmsolver_multistep as dpm_module  # noqa: E402
from diffusers import DPMSolverMultistepScheduler  # noqa: E402

torch.set_num_threads(1)
diffusers.utils.logging.set_verbosity_error()

VARIANTS = {
    "sde": {},
    "sde_heun": {"solver_type": "heun"},
    "sde_order1": {"solver_order": 1},
    "sde_karras": {"use_karras_sigmas": True},
    "sde_sigma_min": {"final_sigmas_type": "sigma_min"},
    "sde_v": {"prediction_type": "v_prediction"},
}
SPACINGS = ["leading", "linspace", "trailing"]
SHAPE = (1, 4, 8, 8)
TRAJECTORIES = sorted({(v, s, n) for v in VARIANTS for s in SPACINGS for n in (1, 4, 10)}
                      | {(v, "leading", 20) for v in VARIANTS})


class InjectedNoise:
    """Stands in for randn_tensor in the DPM-Solver module: returns prepared tensors in order."""

    def __init__(self):
        self.queue = []
        self.calls = 0

    def __call__(self, shape, generator=None, device=None, dtype=None, layout=None):
        noise = self.queue[self.calls]
        assert tuple(shape) == tuple(noise.shape), (shape, noise.shape)
        self.calls += 1
        return noise.to(dtype=dtype) if dtype is not None else noise.clone()


INJECTED = InjectedNoise()
dpm_module.randn_tensor = INJECTED


def make(variant, base_config, spacing):
    return DPMSolverMultistepScheduler.from_config(
        dict(base_config, algorithm_type="sde-dpmsolver++", timestep_spacing=spacing, **VARIANTS[variant]))


def trajectory(out, variant, base_config, spacing, n, initial, run_index):
    s = make(variant, base_config, spacing)
    s.set_timesteps(n)
    key = f"{variant}.{spacing}.n{n}"
    out[key + ".timesteps"] = s.timesteps.clone()
    out[key + ".sigmas"] = s.sigmas.to(torch.float32).clone()
    gen = torch.Generator().manual_seed(3000 + run_index)
    noise = [torch.randn(SHAPE, generator=gen, dtype=torch.float32) for _ in range(n)]
    INJECTED.queue, INJECTED.calls = noise, 0
    record_trajectory(out, key, s, initial)
    assert INJECTED.calls == n, (key, INJECTED.calls)
    out[key + ".noise"] = torch.stack(noise).contiguous()


def pipeline_goldens(tiny_sd, base_config):
    latents_shape = (2, 4, 32, 32)  # tiny-sd's latents_init: both prompts' latents in one tensor
    noise = {}
    for run_index, variant in enumerate(("sde", "sde_karras")):
        gen = torch.Generator().manual_seed(4000 + run_index)
        noise[variant] = [torch.randn(latents_shape, generator=gen, dtype=torch.float32)
                          for _ in range(TINY_SD_PIPELINE_STEPS)]

    def before_call(variant):
        INJECTED.queue, INJECTED.calls = noise[variant], 0

    def after_call(variant):
        assert INJECTED.calls == TINY_SD_PIPELINE_STEPS, (variant, INJECTED.calls)

    schedulers = {v: make(v, base_config, "linspace") for v in noise}  # the class's default spacing
    out, _ = tiny_sd_pipeline_runs(tiny_sd, schedulers, before_call, after_call)
    for variant, draws in noise.items():
        out[f"{variant}.noise"] = torch.stack(draws).contiguous()
        print(f"pipeline {variant}: timesteps {out[variant + '.timesteps'].tolist()}")
    return out


def main(tiny_sd, out_dir):
    base_config = base_config_of(os.path.join(tiny_sd, "scheduler", "scheduler_config.json"))
    out = {}
    initial = initial_latent()
    out["initial_latent"] = initial
    for run_index, (variant, spacing, n) in enumerate(TRAJECTORIES):
        trajectory(out, variant, base_config, spacing, n, initial, run_index)
    os.makedirs(out_dir, exist_ok=True)
    save_goldens(out, os.path.join(out_dir, "sde.safetensors"), "tools/goldens/make_sde_goldens.py",
                 numpy=numpy.__version__, base_config=json.dumps(base_config, sort_keys=True),
                 variants=json.dumps(VARIANTS, sort_keys=True),
                 trajectories=json.dumps([list(t) for t in TRAJECTORIES]))
    print(f"wrote {len(out)} scheduler tensors")
    save_goldens(pipeline_goldens(tiny_sd, base_config), os.path.join(out_dir, "pipeline.safetensors"),
                 "tools/goldens/make_sde_goldens.py", base="tiny-sd goldens/pipeline.safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
