"""Checks our LCM UNet (models.py with time_cond_proj_dim) and guidance embedding against diffusers'
UNet2DConditionModel + LatentConsistencyModelPipeline.get_guidance_scale_embedding on the demo
UNet's config with a random cond_proj. Exit code 1 on failure (max abs err <= 1e-4 * max|ref|).

  /usr/bin/python3 tools/demo-model/check_lcm_unet.py [--model resources/demo-model-lcm | work/v2/export-lcm]
"""
import argparse
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
from diffusers import UNet2DConditionModel  # noqa: E402
from diffusers.pipelines.latent_consistency_models.pipeline_latent_consistency_text2img import (  # noqa: E402
    LatentConsistencyModelPipeline)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import models  # noqa: E402
import sampling  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(configs.ROOT, "resources", "demo-model"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    pipe = sampling.Pipeline(args.model)
    cfg = dict(pipe.unet.config, time_cond_proj_dim=pipe.unet.config.get("time_cond_proj_dim") or 256)
    ours = models.UNet2DConditionModel(cfg).eval()
    state = pipe.unet.state_dict()
    g = torch.Generator().manual_seed(0)
    if "time_embedding.cond_proj.weight" not in state:
        state["time_embedding.cond_proj.weight"] = torch.randn(ours.time_embedding.cond_proj.weight.shape, generator=g)
    ours.load_state_dict(state)
    ref = UNet2DConditionModel(**{k: v for k, v in cfg.items() if not k.startswith("_")}).eval()
    ref.load_state_dict(state)
    w = torch.tensor([0.0, 2.0, 6.5])
    emb_ref = LatentConsistencyModelPipeline.get_guidance_scale_embedding(None, w, cfg["time_cond_proj_dim"])
    emb = models.guidance_scale_embedding(w, cfg["time_cond_proj_dim"])
    s = cfg["sample_size"]  # 8 (v1) or 16 (v2)
    x = torch.randn(3, 4, s, s, generator=g)
    ctx = pipe.embed(["a large red star on a blue background", "a yellow ring", ""])
    t = torch.tensor([999, 499, 19])
    with torch.no_grad():
        r = ref(x, t, ctx, timestep_cond=emb_ref).sample
        o = ours(x, t, ctx, timestep_cond=emb)
    ok = True
    for name, a, b in (("guidance embedding", emb, emb_ref), ("lcm unet eps", o, r)):
        err, scale = float((a - b).abs().max()), float(b.abs().max())
        good = err <= 1e-4 * max(1.0, scale)
        ok &= good
        print(f"{name}: max abs err {err:.2e} (ref max {scale:.2f}) {'PASS' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
