#!/usr/bin/python3
"""Karras-sigma goldens (use_karras_sigmas: LMS, Euler, DPM-Solver++), computed by diffusers 0.31
(torch, CPU, float32, one thread).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_karras_goldens.py tests/data/tiny-sd tests/data/karras-sigmas

1. Schedulers (karras.safetensors): each class is built as `Cls.from_config(config)`, config being
   tiny-sd's scheduler_config.json (SD 1.x betas, steps_offset 1) without its _class_name, plus
   `use_karras_sigmas=True` and `timestep_spacing` set to each of leading / linspace / trailing;
   variants: `euler_bounds` (Euler's own sigma_min 0.1 and sigma_max 10) and
   `dpmpp2m_sigma_min` (final_sigmas_type "sigma_min"). Stored per (variant, spacing, n):
     <v>.<spacing>.n<n>.timesteps, .sigmas, .init_noise_sigma   for n in GRID_STEPS
     <v>.<spacing>.n<n>.samples / .model_inputs / .model_outputs / .pred_original   for the
     trajectories (TRAJECTORIES), with make_fast_scheduler_goldens.py's stand-in model
     (model_input * 0.1f + (float)(0.01 * cos(t / 100))) and initial latent (`initial_latent`,
     torch.randn, seed 20).
2. The pipeline (pipeline.safetensors): diffusers' StableDiffusionPipeline on tiny-sd (its UNet and
   VAE; 5 steps, guidance 7.5) given the tiny-sd pipeline goldens' prompt and negative prompt
   embeddings and initial latents, with each Karras scheduler (`<v>.latents_final`, `<v>.images`,
   `<v>.timesteps`) — the same run as tiny-sd's goldens/pipeline.safetensors but for the sigmas.
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
    base_config_of,
    initial_latent,
    record_trajectory,
    save_goldens,
    tiny_sd_pipeline_runs,
)

import diffusers  # noqa: E402
from diffusers import DPMSolverMultistepScheduler, EulerDiscreteScheduler, LMSDiscreteScheduler  # noqa: E402

torch.set_num_threads(1)
diffusers.utils.logging.set_verbosity_error()

VARIANTS = {
    "lms": (LMSDiscreteScheduler, {}),
    "dpmpp2m": (DPMSolverMultistepScheduler, {}),
    "euler": (EulerDiscreteScheduler, {}),
    "euler_bounds": (EulerDiscreteScheduler, {"sigma_min": 0.1, "sigma_max": 10.0}),
    "dpmpp2m_sigma_min": (DPMSolverMultistepScheduler, {"final_sigmas_type": "sigma_min"}),
}
SPACINGS = ["leading", "linspace", "trailing"]
GRID_STEPS = [1, 2, 3, 4, 5, 8, 10, 20, 25, 50]
SHAPE = (1, 4, 8, 8)
TRAJECTORIES = sorted({(v, s, n) for v in VARIANTS for s in SPACINGS for n in (4, 10)}
                      | {(v, "leading", 20) for v in VARIANTS})


def make(variant, base_config, spacing):
    cls, extra = VARIANTS[variant]
    return cls.from_config(dict(base_config, timestep_spacing=spacing, use_karras_sigmas=True, **extra))


def grid(out, variant, base_config, spacing, n):
    s = make(variant, base_config, spacing)
    s.set_timesteps(n)
    key = f"{variant}.{spacing}.n{n}"
    out[key + ".timesteps"] = s.timesteps.clone()
    out[key + ".sigmas"] = s.sigmas.to(torch.float32).clone()
    out[key + ".init_noise_sigma"] = torch.tensor([float(s.init_noise_sigma)], dtype=torch.float64)


def trajectory(out, variant, base_config, spacing, n, initial):
    s = make(variant, base_config, spacing)
    s.set_timesteps(n)
    record_trajectory(out, f"{variant}.{spacing}.n{n}", s, initial)


def pipeline_goldens(tiny_sd, base_config):
    schedulers = {}
    for variant in ("lms", "dpmpp2m", "euler"):
        cls, extra = VARIANTS[variant]
        schedulers[variant] = cls.from_config(dict(base_config, use_karras_sigmas=True, **extra))
    out, g = tiny_sd_pipeline_runs(tiny_sd, schedulers)
    for variant in schedulers:
        print(f"pipeline {variant} karras: timesteps {out[variant + '.timesteps'].tolist()}, "
              f"images differ from the uniform sigmas' by "
              f"{float((out[variant + '.images'] - torch.as_tensor(g[variant + '.images'])).abs().max()):.3g}")
    return out


def main(tiny_sd, out_dir):
    base_config = base_config_of(os.path.join(tiny_sd, "scheduler", "scheduler_config.json"))
    out = {}
    for variant in VARIANTS:
        for spacing in SPACINGS:
            for n in GRID_STEPS:
                grid(out, variant, base_config, spacing, n)
    initial = initial_latent()
    out["initial_latent"] = initial
    for variant, spacing, n in TRAJECTORIES:
        trajectory(out, variant, base_config, spacing, n, initial)
    os.makedirs(out_dir, exist_ok=True)
    save_goldens(out, os.path.join(out_dir, "karras.safetensors"), "tools/goldens/make_karras_goldens.py",
                 numpy=numpy.__version__, base_config=json.dumps(base_config, sort_keys=True),
                 variants=json.dumps({k: v[1] for k, v in VARIANTS.items()}, sort_keys=True),
                 trajectories=json.dumps([list(t) for t in TRAJECTORIES]))
    print(f"wrote {len(out)} scheduler tensors")
    save_goldens(pipeline_goldens(tiny_sd, base_config), os.path.join(out_dir, "pipeline.safetensors"),
                 "tools/goldens/make_karras_goldens.py", base="tiny-sd goldens/pipeline.safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
