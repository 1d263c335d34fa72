"""Cross-checks the exported folder with the C++ engine, if an `octodiff-cli` binary is around
(it is not built by this tool): (1) same initial latents -> the engine's image vs our torch
pipeline (--compat diffusers), (2) the held-out agreement measured on engine images (default flax
semantics and JAX-PRNG seeds 0..S-1; DDIM 20, PNDM 50 and PNDM 20 steps, guidance 7.5).

  /usr/bin/python3 tools/demo-model/check_engine.py --cli build/engine/cli/octodiff-cli
  /usr/bin/python3 tools/demo-model/check_engine.py --version 2 --cli /tmp/octodiff-cli --model tools/demo-model/work/v2/export
(version 2: results in eval/v2/, shape class measured too; --runs picks the held-out runs.)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import evaluate  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402
import shape_class  # noqa: E402


def run(cli, model, prompt, extra, tmp):
    out = os.path.join(tmp, "img.npy")
    cmd = [cli, "generate", "--model", model, "--prompt", prompt, "--save-array", out,
           "--out", os.path.join(tmp, "grid.png"), "--threads", "2", "--quiet"] + extra
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return np.load(out).reshape(-1, 64, 64, 3)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default=evaluate.MODEL)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--runs", default="ddim20,pndm50,pndm20", help="held-out runs on engine images")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    os.makedirs(configs.EVAL, exist_ok=True)
    torch.set_num_threads(2)
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        entries = json.load(f)["prompts"]
    pipe = sampling.Pipeline(args.model)
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        # (1) parity of the whole pipeline, torch semantics, same latents
        errs = []
        for k, (sched, steps) in enumerate([("ddim", 20), ("pndm", 20)]):
            s_ = pipe.unet.config["sample_size"]
            lat = torch.randn(1, 4, s_, s_, generator=torch.Generator().manual_seed(k))
            np.save(os.path.join(tmp, "lat.npy"), lat.numpy()[None].astype(np.float32))
            p = entries[k]["prompt"]
            eng = run(args.cli, args.model, p, ["--compat", "diffusers", "--scheduler", sched, "--steps", str(steps),
                                                "--latents", os.path.join(tmp, "lat.npy")], tmp)
            ours = pipe.generate([p], None, guidance=7.5, steps=steps, sampler=sched, latents=lat, as_float=True)[0]
            err = float(np.abs(eng - ours).max())
            errs.append(err)
            print(f"engine vs torch ({sched}, {steps} steps, g 7.5, '{p}'): max abs image diff {err:.2e}", flush=True)
        res["parity_max_abs_image_diff"] = errs
        # (2) held-out agreement on engine images (default flax semantics, engine's own seeds)
        for r in args.runs.split(","):
            compat, sched, steps = "flax", r.rstrip("0123456789"), int(r.lstrip("abcdefghijklmnopqrstuvwxyz"))
            ok = col = pos = shp = 0
            imgs = []
            for e in entries:
                for s in range(args.seeds):
                    im = run(args.cli, args.model, e["prompt"], ["--compat", compat, "--seed", str(s), "--steps", str(steps),
                                                                  "--scheduler", sched], tmp)
                    u8 = np.rint(im * 255).astype(np.uint8)
                    imgs.append(u8)
                    a, c, p_ = measure.agrees(e, measure.measure(u8))
                    ok, col, pos = ok + a, col + c, pos + p_
                    shp += shape_class.classify(u8)["shape"] == e["shape"]
            n = len(imgs)
            res[f"engine_{compat}_{sched}{steps}_g7.5"] = {"agreement": ok / n, "colour_agreement": col / n,
                                                   "position_agreement": pos / n, "shape_class": shp / n,
                                                   "images": n}
            evaluate.save_grid(os.path.join(configs.EVAL, f"engine_{compat}_{sched}{steps}_heldout.png"), np.stack(imgs), 8)
            print(f"engine ({compat}, {sched} {steps} steps, g 7.5): agreement {ok / n:.3f} (colours {col / n:.3f}, "
                  f"position {pos / n:.3f}, shape class {shp / n:.3f}) over {n}", flush=True)
    with open(os.path.join(configs.EVAL, "engine_check.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
