"""Procedural "shapes world": 64x64 RGB images of one or two flat shapes with English captions.

Everything is seeded numpy; `make_dataset(n, seed)` is deterministic. Combinations listed in
heldout.json (shape colour x shape x background colour) never appear in training images.

Caption grammar (full form):  "a {size} {colour} {shape} on {a|an} {background} background, {position}"
e.g. "a small red circle on a blue background, top left". Partial captions drop fields
("a red circle on a blue background", "a large circle, centre", "a red shape", "red") so that
short prompts and colour-only negative prompts mean something to the model. Two-shape images:
"a {colour} {shape} and a {colour} {shape} on a {background} background" (first one on the left).

Synonyms (demo-model version 2, `synonyms=True`): words people type for the same things replace the
grammar's word in part of the captions: large -> big (40 %), small -> little / tiny (25 % each),
the position "centre" -> center (25 %), middle (15 %), in the middle (10 %), in the centre (10 %).
With synonyms=False the generator draws exactly the random numbers of version 1 (same dataset).
"""
import json
import os

import numpy as np

SIZE = 64
SS = 2  # supersampling factor for anti-aliased edges

# Reference palette (RGB, 0-255). The evaluation's colour classifier uses exactly this table.
PALETTE = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (240, 220, 40),
    "orange": (245, 140, 30), "purple": (140, 60, 190), "white": (245, 245, 245),
    "black": (20, 20, 20), "grey": (128, 128, 128),
}
SHAPE_COLOURS = ["red", "green", "blue", "yellow", "orange", "purple"]
BACKGROUNDS = SHAPE_COLOURS + ["white", "black", "grey"]
SHAPES = ["circle", "square", "triangle", "star", "ring"]
SIZES = {"small": (8.0, 10.5), "large": (15.0, 18.5)}  # "radius" range in pixels
# position word -> nominal centre (x, y) in pixels; jittered by up to +-3 px.
# version-2 synonyms: canonical word -> [(word, probability)] (the rest keeps the canonical word)
SYNONYMS = {
    "large": [("big", 0.4)],
    "small": [("little", 0.25), ("tiny", 0.25)],
    "centre": [("center", 0.25), ("middle", 0.15), ("in the middle", 0.1), ("in the centre", 0.1)],
}
POSITIONS = {
    "top left": (16, 16), "top": (32, 16), "top right": (48, 16),
    "left": (16, 32), "centre": (32, 32), "right": (48, 32),
    "bottom left": (16, 48), "bottom": (32, 48), "bottom right": (48, 48),
}
HERE = os.path.dirname(os.path.abspath(__file__))


def load_heldout(path=os.path.join(HERE, "heldout.json")):
    with open(path) as f:
        h = json.load(f)
    return {(e["shape_colour"], e["shape"], e["background"]) for e in h["prompts"]}


def shape_mask(shape, cx, cy, r, rot):
    """Anti-aliased coverage mask (SIZE x SIZE, float in [0,1]) of one shape."""
    n = SIZE * SS
    ys, xs = (np.mgrid[0:n, 0:n] + 0.5) / SS
    dx, dy = xs - cx, ys - cy
    c, s = np.cos(rot), np.sin(rot)
    u, v = c * dx + s * dy, -s * dx + c * dy  # rotated coordinates
    if shape == "circle":
        m = dx * dx + dy * dy <= r * r
    elif shape == "ring":
        d2 = dx * dx + dy * dy
        m = (d2 <= r * r) & (d2 >= (0.55 * r) ** 2)
    elif shape == "square":
        h = r * 0.85
        m = (np.abs(u) <= h) & (np.abs(v) <= h)
    elif shape in ("triangle", "star"):
        k = 3 if shape == "triangle" else 5
        ang = np.arctan2(v, u) + np.pi / 2
        rad = np.sqrt(u * u + v * v)
        sector = 2 * np.pi / k
        a = np.mod(ang, sector) - sector / 2
        if shape == "triangle":
            # distance to the edge of a regular triangle with circumradius r
            m = rad * np.cos(a) <= r * 0.5 * 1.15
        else:
            inner = 0.45 * r
            # star: linear interpolation between outer tips and inner notches in polar angle
            t = np.abs(a) / (sector / 2)
            m = rad <= r * (1 - t) + inner * t
    else:
        raise ValueError(shape)
    return m.reshape(SIZE, SS, SIZE, SS).mean(axis=(1, 3))


def background(rng, colour):
    img = np.empty((SIZE, SIZE, 3), np.float32)
    img[:] = PALETTE[colour]
    kind = rng.integers(0, 4)
    if kind == 1:  # faint noise
        img += rng.normal(0, 5, (SIZE, SIZE, 1))
    elif kind == 2:  # gentle gradient
        g = np.linspace(-1, 1, SIZE, dtype=np.float32)
        d = g[None, :, None] if rng.random() < 0.5 else g[:, None, None]
        img += d * rng.uniform(6, 14)
    elif kind == 3:  # faint stripes
        p = rng.integers(6, 12)
        stripes = (np.arange(SIZE) // (p // 2)) % 2
        img += (stripes[:, None, None] if rng.random() < 0.5 else stripes[None, :, None]) * rng.uniform(5, 10)
    return img


def paint(img, mask, colour):
    rgb = np.array(PALETTE[colour], np.float32)
    img[:] = img * (1 - mask[..., None]) + rgb * mask[..., None]


def art(word):
    """English article for the word that follows it ("an orange", "a red")."""
    return "an" if word[0] in "aeiou" else "a"


def synonym(rng, word):
    """The word or one of its synonyms (version 2), drawn with SYNONYMS' probabilities."""
    u, acc = rng.random(), 0.0
    for alt, p in SYNONYMS.get(word, []):
        acc += p
        if u < acc:
            return alt
    return word


def caption_single(rng, size, colour, shape, bg, pos, synonyms=False):
    """Full caption most of the time; partial captions with some fields dropped otherwise."""
    u = rng.random()
    if u < 0.02:
        return colour
    if u < 0.04:
        return f"{art(colour)} {colour} shape"
    if u < 0.06:
        return f"{art(colour)} {colour} {shape}"
    if u < 0.08:
        return f"{bg} background"
    keep = {k: rng.random() > p for k, p in
            [("size", 0.2), ("colour", 0.1), ("shape", 0.1), ("bg", 0.1), ("pos", 0.2)]}
    words = []
    if keep["size"]:
        words.append(synonym(rng, size) if synonyms else size)
    if keep["colour"]:
        words.append(colour)
    words.append(shape if keep["shape"] else "shape")
    text = art(words[0]) + " " + " ".join(words)
    if keep["bg"]:
        text += f" on {art(bg)} {bg} background"
    if keep["pos"]:
        text += f", {synonym(rng, pos) if synonyms else pos}"
    return text


def sample(rng, heldout, synonyms=False):
    """One (image uint8 HxWx3, caption) pair avoiding held-out (colour, shape, background)."""
    while True:
        bg = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
        two = rng.random() < 0.15
        n = 2 if two else 1
        cols = [c for c in SHAPE_COLOURS if c != bg]
        colours = [cols[i] for i in rng.choice(len(cols), n, replace=False)]
        shapes = [SHAPES[rng.integers(len(SHAPES))] for _ in range(n)]
        if any((c, s, bg) in heldout for c, s in zip(colours, shapes)):
            continue
        break
    img = background(rng, bg)
    if two:
        y = rng.uniform(24, 40)
        for i, (c, s) in enumerate(zip(colours, shapes)):
            r = rng.uniform(8.0, 12.0)
            x = (16 if i == 0 else 48) + rng.uniform(-3, 3)
            paint(img, shape_mask(s, x, y, r, rng.uniform(-0.3, 0.3)), c)
        text = (f"{art(colours[0])} {colours[0]} {shapes[0]} and {art(colours[1])} {colours[1]} {shapes[1]}"
                f" on {art(bg)} {bg} background")
    else:
        size = "small" if rng.random() < 0.5 else "large"
        pos = list(POSITIONS)[rng.integers(len(POSITIONS))]
        px, py = POSITIONS[pos]
        r = rng.uniform(*SIZES[size])
        x, y = px + rng.uniform(-3, 3), py + rng.uniform(-3, 3)
        paint(img, shape_mask(shapes[0], x, y, r, rng.uniform(-0.3, 0.3)), colours[0])
        text = caption_single(rng, size, colours[0], shapes[0], bg, pos, synonyms)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), text


def make_dataset(n, seed, synonyms=False):
    """Returns (images uint8 [n,64,64,3], captions list[str])."""
    rng = np.random.default_rng(seed)
    heldout = load_heldout()
    imgs = np.empty((n, SIZE, SIZE, 3), np.uint8)
    caps = []
    for i in range(n):
        imgs[i], c = sample(rng, heldout, synonyms)
        caps.append(c)
    return imgs, caps


def caption_corpus(synonyms=False):
    """Every word the caption grammar (and the held-out prompts) can produce, for the BPE learner."""
    texts = ["a an small large shape on a background and , " + " ".join(POSITIONS)]
    if synonyms:
        texts += [" ".join(alt for alts in SYNONYMS.values() for alt, _ in alts)]
    texts += [" ".join(SHAPE_COLOURS + BACKGROUNDS + SHAPES)]
    # weight the frequent phrases so merges come out in a natural order
    texts += [f"a {s} {c} {sh} on {art(b)} {b} background, {p}" for s in SIZES for c in SHAPE_COLOURS
              for sh in SHAPES for b in BACKGROUNDS for p in POSITIONS if c != b]
    return texts
