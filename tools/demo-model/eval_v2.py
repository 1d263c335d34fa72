"""Evaluates a demo model of version 2 (or any exported folder) the way evaluate.py / eval_fast.py do,
with the shape class added everywhere:
  - the 12 held-out prompts x seeds 0..S-1 (torch.Generator per seed): agreement (measure.py: shape
    colour + background + position), shape class (shape_class.py) per shape;
  - the three complaint prompts of issue 20.7 x seeds 0, 1, 2 (eval_fast.COMPLAINT);
  - synonym prompts (big / tiny / little / center / middle) x seeds 0, 1, 2.
Samplers at guidance 7.5: DDIM 20 and DDIM 8 (default), PNDM 50 with --pndm50.
--position-probe: does the position word move the shape? "a large red circle on a blue background, <pos>"
for 7 position words x seeds 0..7 (DDIM 8): mean centroid per word, and per seed the spread of the
centroid over the words (0 px = the position word has no effect; the seed's noise alone places it).

  nice -n 10 /usr/bin/python3 tools/demo-model/eval_v2.py --version 2 --from-ckpt --tag step2000
  nice -n 10 /usr/bin/python3 tools/demo-model/eval_v2.py --version 2 --model tools/demo-model/work/v2/export --pndm50
  nice -n 10 /usr/bin/python3 tools/demo-model/eval_v2.py --model resources/demo-model --tag shipped   # version 1
Writes eval/v<N>/results_<tag>.json and grids eval/v<N>/<tag>_<run>_<set>.png.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402
from eval_fast import COMPLAINT, score  # noqa: E402
from evaluate import save_grid  # noqa: E402

SYNONYM_PROMPTS = [
    {"prompt": "a big red star on a blue background", "shape_colour": "red", "shape": "star", "background": "blue"},
    {"prompt": "a tiny yellow ring on a black background, center", "shape_colour": "yellow", "shape": "ring",
     "background": "black", "position": "centre"},
    {"prompt": "a little blue square on a white background, top left", "shape_colour": "blue", "shape": "square",
     "background": "white", "position": "top left"},
    {"prompt": "a big purple triangle on a grey background, in the middle", "shape_colour": "purple",
     "shape": "triangle", "background": "grey", "position": "centre"},
    {"prompt": "a large orange circle on a green background, middle", "shape_colour": "orange", "shape": "circle",
     "background": "green", "position": "centre"},
]


def run(pipe, entries, seeds, tag, sampler, steps):
    E = [e for e in entries for _ in seeds]
    t0 = time.time()
    imgs = pipe.generate([e["prompt"] for e in E], [s for _ in entries for s in seeds], guidance=7.5, steps=steps,
                         sampler=sampler)
    res = score(E, imgs, all("position" in e for e in entries))
    res["seconds"] = round(time.time() - t0, 1)
    save_grid(os.path.join(configs.EVAL, f"{tag}.png"), imgs, len(seeds) * 2 if len(seeds) > 3 else 6)
    print(f"{tag:>36}: agreement {res['agreement']:.3f} colours {res['colours']:.3f} shape {res['shape_class']:.3f} "
          f"{res['shape_class_by_shape']} ({res['seconds']:.0f}s)", flush=True)
    return res


PROBE_POSITIONS = ["left", "right", "top", "bottom", "top left", "bottom right", "centre"]


def position_probe(pipe, seeds=8):
    out = {}
    cents = []
    for pos in PROBE_POSITIONS:
        imgs = pipe.generate([f"a large red circle on a blue background, {pos}"] * seeds, list(range(seeds)),
                             guidance=7.5, steps=8, sampler="ddim")
        ms = [measure.measure(i) for i in imgs]
        c = np.array([[m["cx"], m["cy"]] if m.get("cx") is not None else [np.nan, np.nan] for m in ms])
        cents.append(c)
        ok = sum(m.get("cx") is not None and measure.position_ok(pos, m["cx"], m["cy"]) for m in ms)
        out[pos] = {"mean_cx": float(np.nanmean(c[:, 0])), "mean_cy": float(np.nanmean(c[:, 1])), "agree": ok}
        print(f"position probe '{pos}': mean centroid ({out[pos]['mean_cx']:.1f}, {out[pos]['mean_cy']:.1f}), "
              f"position right {ok}/{seeds}", flush=True)
    cents = np.stack(cents)  # [word, seed, 2]
    spread = np.nanmax(cents, axis=0) - np.nanmin(cents, axis=0)  # [seed, 2]
    out["mean_spread_px"] = float(np.nanmean(np.hypot(spread[:, 0], spread[:, 1])))
    out["agreement"] = sum(out[p]["agree"] for p in PROBE_POSITIONS) / (seeds * len(PROBE_POSITIONS))
    print(f"position probe: centroid spread over the 7 words, mean over seeds {out['mean_spread_px']:.1f} px; "
          f"position right {out['agreement']:.3f}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(configs.WORK, "export"))
    ap.add_argument("--from-ckpt", action="store_true",
                    help="export the current training checkpoint (EMA) to work/v<N>/export_eval first")
    ap.add_argument("--tag", default="export")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--pndm50", action="store_true")
    ap.add_argument("--lcm", action="store_true", help="an LCM folder (train_lcm.py): LCM 2 / 4 / 8 steps instead of DDIM")
    ap.add_argument("--position-probe", action="store_true")
    ap.add_argument("--probe-only", action="store_true", help="only the position probe (an early check)")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(configs.EVAL, exist_ok=True)
    model = args.model
    if args.from_ckpt:
        import export
        model = os.path.join(configs.WORK, "export_eval")
        export.export(model)
    pipe = sampling.Pipeline(model)
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        heldout = json.load(f)["prompts"]
    runs = ([] if args.probe_only else [("lcm", 2), ("lcm", 4), ("lcm", 8)] if args.lcm
            else [("ddim", 20), ("ddim", 8)] + ([("pndm", 50)] if args.pndm50 else []))
    out = {"model": os.path.relpath(model, configs.ROOT), "seeds": args.seeds, "guidance": 7.5}
    if args.from_ckpt:
        out["unet_step"] = torch.load(os.path.join(configs.WORK, "unet_ckpt.pt"))["step"]
    for sampler, n in runs:
        name = f"{sampler}{n}"
        out[name] = {
            "heldout": run(pipe, heldout, list(range(args.seeds)), f"{args.tag}_{name}_heldout", sampler, n),
            "complaint": run(pipe, COMPLAINT, [0, 1, 2], f"{args.tag}_{name}_complaint", sampler, n),
            "synonyms": run(pipe, SYNONYM_PROMPTS, [0, 1, 2], f"{args.tag}_{name}_synonyms", sampler, n)}
    if args.position_probe or args.probe_only:
        out["position_probe"] = position_probe(pipe)
    with open(os.path.join(configs.EVAL, f"results_{args.tag}.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"wrote {os.path.relpath(configs.EVAL, configs.ROOT)}/results_{args.tag}.json")


if __name__ == "__main__":
    main()
