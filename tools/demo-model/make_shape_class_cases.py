"""Test cases for the C++ re-implementation of shape_class.py (tests/support/shape_class.*):
images and what shape_class.classify says of them, so the C++ rule is checked against this one.

Writes into OUT (default tests/data/shape-class):
- gt_NN.png: 40 single-shape ground-truth renders (dataset.sample, seed 99: never trained on);
- soft_NN.png: 12 of them blurred (two 3×3 box blurs), edges as soft as a VAE makes them;
- gen_NN.png: images the demo model made (`--generated DIR`: PNGs from octodiff-cli, copied);
- cases.json: per file, the rendered shape (null for generated images) and classify()'s result
  (class, IoU per class, hole fraction).

    /usr/bin/python3 tools/demo-model/make_shape_class_cases.py --generated /tmp/gen
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402
import shape_class  # noqa: E402


def box_blur(img):
    """One 3×3 box blur with edge replication (uint8 in, uint8 out)."""
    f = np.pad(img.astype(np.float64), ((1, 1), (1, 1), (0, 0)), mode="edge")
    h, w = img.shape[:2]
    acc = sum(f[dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / 9.0
    return np.clip(np.rint(acc), 0, 255).astype(np.uint8)


def single_shape_renders(n, seed):
    rng = np.random.default_rng(seed)
    heldout = dataset.load_heldout()
    painted = []  # the shapes sample() draws (its caption may say only "shape")
    render = dataset.shape_mask
    dataset.shape_mask = lambda shape, *a: painted.append(shape) or render(shape, *a)
    out = []
    while len(out) < n:
        painted.clear()
        img, _ = dataset.sample(rng, heldout)
        if len(painted) == 1:  # two shapes are not what the classifier measures
            out.append((img, painted[0]))
    dataset.shape_mask = render
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/shape-class")
    ap.add_argument("--generated", help="folder of demo-model PNGs to include")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cases = []

    def add(name, img, truth):
        Image.fromarray(img).save(os.path.join(args.out, name))
        r = shape_class.classify(img)
        cases.append({"file": name, "rendered": truth, "shape": r["shape"], "iou": r["iou"],
                      "hole_fraction": float(r["hole_fraction"])})

    renders = single_shape_renders(40, 99)
    for i, (img, truth) in enumerate(renders):
        add(f"gt_{i:02d}.png", img, truth)
    for i, (img, truth) in enumerate(renders[:12]):
        add(f"soft_{i:02d}.png", box_blur(box_blur(img)), truth)
    if args.generated:
        files = sorted(f for f in os.listdir(args.generated) if f.endswith(".png"))
        for i, f in enumerate(files):
            img = np.asarray(Image.open(os.path.join(args.generated, f)).convert("RGB"))
            add(f"gen_{i:02d}.png", img, None)
    with open(os.path.join(args.out, "cases.json"), "w") as fh:
        json.dump(cases, fh, indent=1)
    right = sum(c["shape"] == c["rendered"] for c in cases if c["rendered"])
    print(f"{len(cases)} cases; rendered shapes recognised: {right}/{sum(1 for c in cases if c['rendered'])}")


if __name__ == "__main__":
    main()
