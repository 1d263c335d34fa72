#!/usr/bin/python3
"""Zero terminal SNR (rescale_betas_zero_snr) and guidance rescale goldens, computed by diffusers
0.31 (torch, CPU, float32, one thread).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_zero_snr_goldens.py tests/data/tiny-sd tests/data/zero-snr

1. Schedulers (schedulers.safetensors): `Cls.from_config(config)` for the six classes that have
   rescale_betas_zero_snr (CLASSES), config being tiny-sd's scheduler_config.json (SD 1.x betas,
   steps_offset 1) without its _class_name, plus rescale_betas_zero_snr=True, the variant's keys
   (VARIANTS: v_prediction, what zero-SNR models are trained with; epsilon for the sigma classes,
   which floor the last alpha_cumprod at 2**-24 and so stay finite; Karras sigmas) and
   timestep_spacing. Per class: <cls>.alphas_cumprod (after the rescale, and the floor). Per
   trajectory (TRAJECTORIES): <cls>.<variant>.<spacing>.n<n>.timesteps, .sigmas (classes that have
   them), .init_noise_sigma, .samples / .model_inputs / .model_outputs / .pred_original, and .noise
   for the stochastic classes — make_fast_scheduler_goldens.py's stand-in model, initial latent and
   trajectory loop. Noise: the randn_tensor of the Euler ancestral, LCM and DPM-Solver modules is
   replaced by make_fast_scheduler_goldens.py's list of prepared draws (torch.randn, seed 5000 +
   run index), stored so the C++ tests inject the same noise.
2. The pipeline (pipeline.safetensors): diffusers' StableDiffusionPipeline on tiny-sd (its UNet and
   VAE; 5 steps, guidance 7.5, the tiny-sd pipeline goldens' embeddings and initial latents) for
   each of PIPELINE_RUNS: a scheduler configuration (tiny-sd's + the keys given) and a
   guidance_rescale. <run>.latents_final, <run>.images, <run>.timesteps. (tiny-sd's UNet is random:
   reading its output as v is as valid a test of the arithmetic as reading it as epsilon.)
"""
import json
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fast_scheduler_goldens import (  # noqa: E402  (the stand-in model, loop, latent and pipeline)
    INJECTED,
    SHAPE,
    base_config_of,
    initial_latent,
    record_grid,
    record_trajectory,
    save_goldens,
    tiny_sd_pipeline_runs,
)

import diffusers  # noqa: E402
import diffusers.schedulers.scheduling_dpmsolver_multistep as dpm_module  # noqa: E402
from diffusers import (  # noqa: E402
    DDIMScheduler,
    DPMSolverMultistepScheduler,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    LCMScheduler,
)

torch.set_num_threads(1)
diffusers.utils.logging.set_verbosity_error()
dpm_module.randn_tensor = INJECTED  # (Euler ancestral's and LCM's are replaced by the import)

CLASSES = {
    "ddim": (DDIMScheduler, {}),
    "euler": (EulerDiscreteScheduler, {}),
    "euler_a": (EulerAncestralDiscreteScheduler, {}),
    "dpmpp2m": (DPMSolverMultistepScheduler, {}),
    "dpmpp2m_sde": (DPMSolverMultistepScheduler, {"algorithm_type": "sde-dpmsolver++"}),
    "lcm": (LCMScheduler, {}),
}
STOCHASTIC = {"euler_a", "dpmpp2m_sde", "lcm"}
VARIANTS = {
    "v": {"prediction_type": "v_prediction"},
    "eps": {"prediction_type": "epsilon"},
    "karras": {"prediction_type": "v_prediction", "use_karras_sigmas": True},
}
SPACINGS = ["leading", "linspace", "trailing"]
TRAJECTORIES = sorted(
    {(c, "v", s, n) for c in CLASSES if c != "lcm" for s in SPACINGS for n in (1, 4, 10)}
    | {("lcm", "v", "leading", n) for n in (1, 4, 8)}  # LCM has no spacing option
    | {(c, "eps", "trailing", 4) for c in ("euler", "euler_a", "dpmpp2m", "dpmpp2m_sde")}
    | {("ddim", "eps", "leading", 4)}  # leading never reaches t = 999, where sqrt(alpha) = 0
    | {(c, "karras", "trailing", 4) for c in ("euler", "dpmpp2m", "dpmpp2m_sde")}
)
ZERO_SNR_V = {"rescale_betas_zero_snr": True, "prediction_type": "v_prediction", "timestep_spacing": "trailing"}
PIPELINE_RUNS = {
    # name: (class, config keys, guidance_rescale)
    "euler_zero_snr_rescaled": (EulerDiscreteScheduler, ZERO_SNR_V, 0.7),
    "ddim_zero_snr": (DDIMScheduler, ZERO_SNR_V, 0.0),
    "ddim_rescaled": (DDIMScheduler, {}, 0.7),
}


def make(name, base_config, variant, spacing):
    cls, keys = CLASSES[name]
    return cls.from_config(dict(base_config, rescale_betas_zero_snr=True, timestep_spacing=spacing, **keys,
                                **VARIANTS[variant]))


def trajectory(out, name, variant, base_config, spacing, n, initial, run_index):
    s = make(name, base_config, variant, spacing)
    s.set_timesteps(n)
    key = f"{name}.{variant}.{spacing}.n{n}"
    record_grid(out, key, s)
    gen = torch.Generator().manual_seed(5000 + run_index)
    noise = [torch.randn(SHAPE, generator=gen, dtype=torch.float32) for _ in range(n)]
    INJECTED.queue, INJECTED.calls = noise, 0
    record_trajectory(out, key, s, initial)
    if name in STOCHASTIC:
        out[key + ".noise"] = torch.stack(noise).contiguous()
    assert torch.isfinite(out[key + ".samples"]).all(), key


def pipeline_goldens(tiny_sd, base_config):
    schedulers = {run: cls.from_config(dict(base_config, **keys)) for run, (cls, keys, _) in PIPELINE_RUNS.items()}
    call_args = {run: {"guidance_rescale": phi} for run, (_, _, phi) in PIPELINE_RUNS.items()}
    out, _ = tiny_sd_pipeline_runs(tiny_sd, schedulers, call_args=call_args)
    for run in PIPELINE_RUNS:
        print(f"pipeline {run}: timesteps {out[run + '.timesteps'].tolist()}")
        assert torch.isfinite(out[run + ".latents_final"]).all(), run
    return out


def main(tiny_sd, out_dir):
    base_config = base_config_of(os.path.join(tiny_sd, "scheduler", "scheduler_config.json"))
    out = {"initial_latent": initial_latent()}
    for name in CLASSES:
        out[f"{name}.alphas_cumprod"] = make(name, base_config, "v", "leading").alphas_cumprod.clone()
    for run_index, (name, variant, spacing, n) in enumerate(TRAJECTORIES):
        trajectory(out, name, variant, base_config, spacing, n, out["initial_latent"], run_index)
    os.makedirs(out_dir, exist_ok=True)
    save_goldens(out, os.path.join(out_dir, "schedulers.safetensors"), "tools/goldens/make_zero_snr_goldens.py",
                 base_config=json.dumps(base_config, sort_keys=True), variants=json.dumps(VARIANTS, sort_keys=True),
                 trajectories=json.dumps([list(t) for t in TRAJECTORIES]))
    print(f"wrote {len(out)} scheduler tensors")
    runs = {run: {"class": cls.__name__, "config": keys, "guidance_rescale": phi}
            for run, (cls, keys, phi) in PIPELINE_RUNS.items()}
    save_goldens(pipeline_goldens(tiny_sd, base_config), os.path.join(out_dir, "pipeline.safetensors"),
                 "tools/goldens/make_zero_snr_goldens.py", base="tiny-sd goldens/pipeline.safetensors",
                 runs=json.dumps(runs, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
