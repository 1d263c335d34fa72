"""Writes heldout.json: the (shape colour, shape, background) combinations training never shows,
the exact prompts the tests use for them, and the measurement rule (see measure.py)."""
import json
import os

import numpy as np

import measure
from dataset import BACKGROUNDS, PALETTE, SHAPE_COLOURS, SHAPES, art

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = "a {size} {shape_colour} {shape} on {article} {background} background, {position}"
POS_CYCLE = ["left", "right", "top", "bottom", "centre", "top left", "bottom right", "top right",
             "bottom left", "centre", "left", "right"]


def main():
    rng = np.random.default_rng(20240607)
    entries, used = [], set()
    # two held-out combos per shape colour, backgrounds spread over all nine.
    bgs = list(rng.permutation(BACKGROUNDS)) * 2
    for i, colour in enumerate(SHAPE_COLOURS * 2):
        while True:
            bg = bgs.pop(0)
            shape = SHAPES[(i + len(entries)) % len(SHAPES)]
            if bg != colour and (colour, shape, bg) not in used:
                break
            bgs.append(bg)
        used.add((colour, shape, bg))
        e = {"size": "large", "shape_colour": colour, "shape": shape, "background": bg,
             "position": POS_CYCLE[len(entries)]}
        e["prompt"] = TEMPLATE.format(article=art(bg), **e)
        entries.append(e)
    doc = {
        "description": "Held-out shape colour x shape x background combinations: no training image shows "
                       "this shape in this colour on this background. Tests generate each prompt with several "
                       "seeds and measure the image with the rule below.",
        "caption_template": TEMPLATE,
        "article": "\"an\" before a word starting with a vowel (orange), else \"a\"",
        "image_size": [64, 64],
        "palette_rgb": {k: list(v) for k, v in PALETTE.items()},
        "measurement": {
            "input": "uint8 RGB image = round(clamp(decoded/2+0.5, 0, 1) * 255)",
            "background_reference": f"per-channel median of all pixels within {measure.BORDER} px of the image "
                                    "border (even count: mean of the two middle values)",
            "shape_region": f"pixels whose Euclidean RGB distance to the background reference is > {measure.DIST}",
            "min_region_pixels": measure.MIN_PIXELS,
            "shape_colour": "per-channel median of the shape-region pixels",
            "colour_classifier": "nearest palette_rgb entry by Euclidean RGB distance (ties: first in palette order)",
            "centroid": "mean column cx and mean row cy of the shape-region pixels (pixel (0,0) is top-left)",
            "position_rules": {"left": "cx < 26", "right": "cx > 37", "top": "cy < 26", "bottom": "cy > 37",
                               "centre": "20 <= cx <= 43 and 20 <= cy <= 43",
                               "compound": "each word of the position is a constraint (\"top left\" = top and left)"},
            "agreement": "shape colour == shape_colour and background colour == background and position rules hold",
        },
        "negative_prompt_test": {
            "prompts": "a large {shape} on {article} {background} background  (no shape colour named)",
            "negative_prompt": "{colour}  (one word, e.g. \"red\")",
            "expectation": "fraction of images whose shape colour is {colour} is lower with the negative prompt",
        },
        "prompts": entries,
    }
    with open(os.path.join(HERE, "heldout.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    for e in entries:
        print(e["prompt"])


if __name__ == "__main__":
    main()
