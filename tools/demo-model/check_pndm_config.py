"""Engine vs diffusers' own UNet2DConditionModel / AutoencoderKL / scheduler on the demo model's
DDIM version (resources/demo-model-ddim), 20 steps, guidance 7.5, --compat diffusers, the same
initial latents; the text embeddings from our CLIP port (sampling.Pipeline.embed: Debian has no
transformers). --scheduler pndm on a folder whose config (DDIMScheduler's) does not name
skip_prk_steps: diffusers' PNDMScheduler.from_config then takes its own default, False (PRK warm-up
steps), and so does the engine; our torch sampler (sampling.py) always skips them. Prints the
engine's and our sampler's max abs image difference from diffusers for both skip_prk_steps values.

  /usr/bin/python3 tools/demo-model/check_pndm_config.py --cli build/engine/cli/octodiff-cli
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
import safetensors.torch  # noqa: E402,F401
from diffusers import AutoencoderKL, DDIMScheduler, PNDMScheduler, UNet2DConditionModel  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sampling  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "resources", "demo-model-ddim"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    m = args.model
    ours = sampling.Pipeline(m)
    unet = UNet2DConditionModel.from_pretrained(m, subfolder="unet").eval()
    vae = AutoencoderKL.from_pretrained(m, subfolder="vae").eval()
    with open(os.path.join(m, "scheduler", "scheduler_config.json")) as f:
        cfg = json.load(f)
    lat = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(0))
    p = "a large orange star on a black background, centre"
    ctx = torch.cat([ours.embed([""]), ours.embed([p])])
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "lat.npy"), lat.numpy()[None].astype(np.float32))
        for name, sch in (("ddim", DDIMScheduler.from_config(cfg)),
                          ("pndm", PNDMScheduler.from_config(cfg)),
                          ("pndm skip_prk_steps", PNDMScheduler.from_config(cfg, skip_prk_steps=True))):
            sch.set_timesteps(20)
            x = lat * sch.init_noise_sigma
            with torch.no_grad():
                for t in sch.timesteps:
                    u, c = unet(torch.cat([x, x]), t, encoder_hidden_states=ctx).sample.chunk(2)
                    x = sch.step(u + 7.5 * (c - u), t, x).prev_sample
                ref = (vae.decode(x / vae.config.scaling_factor).sample / 2 + 0.5).clamp(0, 1)[0].permute(1, 2, 0).numpy()
            engine = ""
            if " " not in name:
                out = os.path.join(tmp, "e.npy")
                subprocess.run([args.cli, "generate", "--model", m, "--prompt", p, "--compat", "diffusers", "--scheduler",
                                name, "--steps", "20", "--latents", os.path.join(tmp, "lat.npy"), "--save-array", out,
                                "--out", os.path.join(tmp, "g.png"), "--quiet"], check=True)
                engine = f"engine {np.abs(np.load(out).reshape(-1, 64, 64, 3)[0] - ref).max():.2e}; "
            tools = ours.generate([p], None, guidance=7.5, steps=20, sampler=name.split()[0], latents=lat, as_float=True)[0]
            print(f"{name:>20}: max abs image diff from diffusers: {engine}tools' sampler {np.abs(tools - ref).max():.2e}",
                  flush=True)


if __name__ == "__main__":
    main()
