"""Measures the exported model (resources/demo-model, exactly the shipped weights) on the held-out
prompts of heldout.json with the measurement rule of measure.py, the way the C++ tests will:

1. rule sanity: the rule applied to ground-truth renders of the held-out prompts;
2. held-out agreement at guidance 1, 3, 7.5 (DDIM, 20 steps, seeds 0..S-1), and PNDM (20, 50 steps) at 7.5;
3. negative prompts: colour frequencies for colour-less prompts with negative prompt "" vs "{colour}".

Writes eval/results.json and image grids eval/*.png.
  nice -n 10 /usr/bin/python3 tools/demo-model/evaluate.py [--seeds 4]
"""
import argparse
import json
import os
import sys
import time
from collections import Counter

import numpy as np

# Other engineers compile on the same 2 cores: OpenMP threads that spin-wait while descheduled
# make a niced job ~10x slower, so wait passively and keep OpenBLAS single-threaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402

EVAL = os.path.join(configs.HERE, "eval")
MODEL = os.path.join(configs.ROOT, "resources", "demo-model")


def save_grid(path, imgs, cols):
    from PIL import Image
    rows = [np.concatenate(list(imgs[i:i + cols]) + [np.zeros_like(imgs[0])] * (cols - len(imgs[i:i + cols])), 1)
            for i in range(0, len(imgs), cols)]
    Image.fromarray(np.concatenate(rows, 0)).save(path)


def render_truth(e, rng):
    img = dataset.background(rng, e["background"])
    px, py = dataset.POSITIONS[e["position"]]
    r = rng.uniform(*dataset.SIZES[e["size"]])
    m = dataset.shape_mask(e["shape"], px + rng.uniform(-3, 3), py + rng.uniform(-3, 3), r, rng.uniform(-0.3, 0.3))
    dataset.paint(img, m, e["shape_colour"])
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def heldout_run(pipe, entries, seeds, guidance, sampler, steps, tag):
    prompts = [e["prompt"] for e in entries for _ in seeds]
    sds = [s for _ in entries for s in seeds]
    imgs = pipe.generate(prompts, sds, guidance=guidance, steps=steps, sampler=sampler)
    res = [measure.agrees(e, measure.measure(im)) for e, im in zip([e for e in entries for _ in seeds], imgs)]
    save_grid(os.path.join(EVAL, f"heldout_{tag}.png"), imgs, len(seeds) * 2)
    n = len(res)
    out = {"guidance": guidance, "sampler": sampler, "steps": steps, "images": n,
           "agreement": sum(r[0] for r in res) / n, "colour_agreement": sum(r[1] for r in res) / n,
           "position_agreement": sum(r[2] for r in res) / n,
           "per_prompt": {e["prompt"]: sum(r[0] for r in res[i * len(seeds):(i + 1) * len(seeds)]) / len(seeds)
                          for i, e in enumerate(entries)}}
    print(f"{tag}: agreement {out['agreement']:.3f} (colours {out['colour_agreement']:.3f}, "
          f"position {out['position_agreement']:.3f}) over {n} images", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--neg-seeds", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="held-out at guidance 7.5 only")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(EVAL, exist_ok=True)
    t0 = time.time()
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        entries = json.load(f)["prompts"]
    results = {"model": os.path.relpath(args.model, configs.ROOT), "seeds": list(range(args.seeds))}

    rng = np.random.default_rng(7)
    truth = [render_truth(e, rng) for e in entries for _ in range(4)]
    ok = [measure.agrees(e, measure.measure(im))[0] for e, im in zip([e for e in entries for _ in range(4)], truth)]
    results["rule_on_ground_truth"] = sum(ok) / len(ok)
    print(f"rule on ground-truth renders: {results['rule_on_ground_truth']:.3f}", flush=True)
    save_grid(os.path.join(EVAL, "heldout_ground_truth.png"), truth, 8)

    pipe = sampling.Pipeline(args.model)
    seeds = list(range(args.seeds))
    runs = [(7.5, "ddim", args.steps)] if args.quick else [
        (1.0, "ddim", args.steps), (3.0, "ddim", args.steps), (7.5, "ddim", args.steps),
        (7.5, "pndm", args.steps), (7.5, "pndm", 50)]
    results["heldout"] = [heldout_run(pipe, entries, seeds, g, s, n, f"{s}{n}_g{g}") for g, s, n in runs]

    if not args.quick:
        # Negative prompts: colour-less prompts; how often does each colour appear with/without "-colour"?
        combos = [("circle", "white"), ("square", "black"), ("star", "grey"), ("triangle", "white")]
        prompts = [f"a large {s} on {dataset.art(b)} {b} background" for s, b in combos]
        P = [p for p in prompts for _ in range(args.neg_seeds)]
        S = [100 + k for _ in prompts for k in range(args.neg_seeds)]
        base = pipe.generate(P, S, guidance=7.5, steps=args.steps)
        base_cols = [measure.measure(im)["shape_colour"] for im in base]
        neg = {"prompts": prompts, "seeds": S[:args.neg_seeds], "guidance": 7.5, "images_per_condition": len(P),
               "baseline_colour_counts": {str(k): v for k, v in Counter(base_cols).items()}, "per_colour": {}}
        for c in dataset.SHAPE_COLOURS:
            imgs = pipe.generate(P, S, guidance=7.5, negative=[c] * len(P), steps=args.steps)
            cols = [measure.measure(im)["shape_colour"] for im in imgs]
            neg["per_colour"][c] = {"without_negative": base_cols.count(c) / len(P),
                                    "with_negative": cols.count(c) / len(P),
                                    "no_shape_found_with_negative": cols.count(None) / len(P)}
            print(f"negative '{c}': {c} frequency {base_cols.count(c)}/{len(P)} -> {cols.count(c)}/{len(P)}", flush=True)
            if c == "red":
                save_grid(os.path.join(EVAL, "negative_red.png"), np.concatenate([base, imgs]), args.neg_seeds * 2)
        pc = neg["per_colour"].values()
        neg["mean_without"] = float(np.mean([v["without_negative"] for v in pc]))
        neg["mean_with"] = float(np.mean([v["with_negative"] for v in pc]))
        neg["colours_rarer"] = sum(v["with_negative"] < v["without_negative"] for v in pc)
        results["negative_prompts"] = neg

        # A few in-distribution prompts, for the README picture.
        demo = ["a large red circle on a white background, centre", "a small blue star on a yellow background, top left",
                "a large green triangle on a black background, bottom right", "a purple ring on a grey background",
                "a yellow square and a blue circle on a red background", "an orange star on a green background, right"]
        imgs = pipe.generate([p for p in demo for _ in range(4)], [s for _ in demo for s in range(4)], guidance=7.5,
                             steps=args.steps)
        save_grid(os.path.join(EVAL, "demo_prompts.png"), imgs, 8)
        results["demo_prompts"] = demo

    results["seconds"] = round(time.time() - t0, 1)
    name = "results_quick.json" if args.quick else "results.json"
    with open(os.path.join(EVAL, name), "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"wrote eval/{name} in {results['seconds']:.0f}s")


if __name__ == "__main__":
    main()
