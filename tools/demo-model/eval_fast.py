"""Few-step evaluation (issue 20.7): today's demo model (PNDM 50, g 7.5) against the LCM-distilled
demo model (resources/demo-model-lcm) at 2/4/8 LCM steps, each image decoded by the VAE and by the
TAESDs that exist, measured with evaluate.py's held-out rule (measure.py) plus the shape class
(shape_class.py), on
  - the 12 held-out prompts x seeds 0..S-1 (torch.Generator per seed, as evaluate.py), and
  - the three prompts of the user complaint in the issue x seeds 0, 1, 2.
Also checks the shape-class rule itself on ground-truth renders and their VAE / TAESD
reconstructions (what any decoder-side fix must reach first).

Writes eval/fast_results.json and grids eval/fast_<run>.png.
  nice -n 5 /usr/bin/python3 tools/demo-model/eval_fast.py [--seeds 4] [--lcm-guidance 7.5]
"""
import argparse
import json
import os
import sys
import time
from collections import Counter

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
import safetensors.torch  # noqa: E402,F401  (save_pretrained uses safetensors.torch)
from diffusers import AutoencoderTiny  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402
import shape_class  # noqa: E402
import shipped_data  # noqa: E402
from evaluate import save_grid  # noqa: E402

EVAL = os.path.join(configs.HERE, "eval")
LCM_MODEL = os.path.join(configs.ROOT, "resources", "demo-model-lcm")
COMPLAINT = [  # issue 20.7, as the user typed them ("big" is not in the caption grammar)
    {"prompt": "a red star on a blue background", "shape_colour": "red", "shape": "star", "background": "blue"},
    {"prompt": "a yellow ring on a black background", "shape_colour": "yellow", "shape": "ring",
     "background": "black"},
    {"prompt": "a big green triangle on a white background", "shape_colour": "green", "shape": "triangle",
     "background": "white"},
]


def decoders(pipe):
    out = {"vae": pipe.decode}
    for name, path in (("taesd", os.path.join(shipped_data.MODEL, "taesd")),
                       ("taesd-sharp", os.path.join(configs.WORK, "taesd-sharp"))):
        if os.path.exists(os.path.join(path, "config.json")):
            t = AutoencoderTiny.from_pretrained(path).eval()
            out[name] = (lambda t: lambda z: sampling.to_images(t.decode(z).sample))(t)
    return out


def score(entries, imgs, with_position):
    n = len(imgs)
    m = [measure.measure(i) for i in imgs]
    shapes = [shape_class.classify(i)["shape"] for i in imgs]
    colours = [e["shape_colour"] == mm["shape_colour"] and e["background"] == mm["background"]
               for e, mm in zip(entries, m)]
    pos = [measure.position_ok(e["position"], mm["cx"], mm["cy"]) if with_position else True
           for e, mm in zip(entries, m)]
    shape_ok = [e["shape"] == s for e, s in zip(entries, shapes)]
    return {"images": n, "agreement": sum(c and p for c, p in zip(colours, pos)) / n,
            "colours": sum(colours) / n, "position": sum(pos) / n if with_position else None,
            "shape_class": sum(shape_ok) / n,
            "agreement_and_shape": sum(c and p and s for c, p, s in zip(colours, pos, shape_ok)) / n,
            "shape_class_by_shape": {k: f"{sum(o for e, o in zip(entries, shape_ok) if e['shape'] == k)}/"
                                        f"{sum(e['shape'] == k for e in entries)}"
                                     for k in shape_class.SHAPES if any(e["shape"] == k for e in entries)},
            "confusions": {f"{t}->{p}": c for (t, p), c in
                           Counter((e["shape"], str(s)) for e, s in zip(entries, shapes)).items() if t != p}}


def rule_check(pipe, decs, n=100):
    """Shape-class rule on ground-truth renders (all 5 shapes, small and large) and reconstructions."""
    rng = np.random.default_rng(3)
    imgs, entries = [], []
    for i in range(n):
        shape, size = shape_class.SHAPES[i % 5], ["small", "large"][(i // 5) % 2]
        bg = dataset.BACKGROUNDS[rng.integers(9)]
        col = [c for c in dataset.SHAPE_COLOURS if c != bg][rng.integers(5)]
        img = dataset.background(rng, bg)
        px, py = list(dataset.POSITIONS.values())[rng.integers(9)]
        m = dataset.shape_mask(shape, px + rng.uniform(-3, 3), py + rng.uniform(-3, 3),
                               rng.uniform(*dataset.SIZES[size]), rng.uniform(-0.3, 0.3))
        dataset.paint(img, m, col)
        imgs.append(np.clip(np.rint(img), 0, 255).astype(np.uint8))
        entries.append({"shape": shape, "shape_colour": col, "background": bg, "position": "", "size": size})
    with torch.no_grad():
        mean, _ = pipe.vae.encode(shipped_data.to_tensor(np.stack(imgs)))
        z = mean * pipe.vae.config["scaling_factor"]
        out = {"ground_truth": score(entries, imgs, False)}
        grids = [np.stack(imgs[:10])]
        for name, dec in decs.items():
            rec = dec(z)
            out[f"reconstructed_{name}"] = score(entries, rec, False)
            grids.append(rec[:10])
    save_grid(os.path.join(EVAL, "fast_rule_check.png"), np.concatenate(grids), 10)
    return out


def run(pipe, decs, entries, seeds, tag, **gen):
    E = [e for e in entries for _ in seeds]
    t0 = time.time()
    with torch.no_grad():
        lat = pipe.generate([e["prompt"] for e in E], [s for _ in entries for s in seeds], output="latents", **gen)
    secs = time.time() - t0
    res = {}
    for name, dec in decs.items():
        with torch.no_grad():
            imgs = dec(lat)
        res[name] = score(E, imgs, "position" in entries[0])
        save_grid(os.path.join(EVAL, f"fast_{tag}_{name}.png"), imgs, len(seeds) * 2 if len(seeds) > 3 else 6)
        r = res[name]
        print(f"{tag:>22} {name:>11}: agreement {r['agreement']:.3f} colours {r['colours']:.3f} "
              f"shape {r['shape_class']:.3f} {r['shape_class_by_shape']} ({secs:.0f}s sampling)", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--lcm-guidance", type=float, default=7.5)
    ap.add_argument("--lcm-model", default=LCM_MODEL)
    ap.add_argument("--part", choices=["baseline", "lcm"], required=True,
                    help="baseline: rule check + today's PNDM 50 (+ DDIM 8 for reference); lcm: the LCM model")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(EVAL, exist_ok=True)
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        heldout = json.load(f)["prompts"]
    base = sampling.Pipeline(shipped_data.MODEL)
    decs = decoders(base)
    results = {"seeds": args.seeds}
    seeds = list(range(args.seeds))
    if args.part == "baseline":
        results["rule_check"] = rule_check(base, decs)
        for k, v in results["rule_check"].items():
            print(f"rule check {k}: shape class {v['shape_class']:.2f} {v['shape_class_by_shape']}", flush=True)
        for sampler, n in (("pndm", 50), ("ddim", 8)):
            results[f"{sampler}{n}_g7.5"] = {
                "heldout": run(base, decs, heldout, seeds, f"{sampler}{n}_heldout", guidance=7.5, steps=n,
                               sampler=sampler),
                "complaint": run(base, decs, COMPLAINT, [0, 1, 2], f"{sampler}{n}_complaint", guidance=7.5, steps=n,
                                 sampler=sampler)}
    else:
        lcm = sampling.Pipeline(args.lcm_model)
        g = args.lcm_guidance
        for n in (1, 2, 4, 8):
            results[f"lcm{n}_g{g}"] = {
                "heldout": run(lcm, decs, heldout, seeds, f"lcm{n}_g{g}_heldout", guidance=g, steps=n, sampler="lcm"),
                "complaint": run(lcm, decs, COMPLAINT, [0, 1, 2], f"lcm{n}_g{g}_complaint", guidance=g, steps=n,
                                 sampler="lcm")}
    name = "fast_results_baseline.json" if args.part == "baseline" else f"fast_results_lcm_g{args.lcm_guidance}.json"
    with open(os.path.join(EVAL, name), "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"wrote eval/{name}")


if __name__ == "__main__":
    main()
