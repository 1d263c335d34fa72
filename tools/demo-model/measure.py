"""The image measurement the held-out tests use (also written out in heldout.json / README so the
C++ tests can implement the identical rule).

Input: uint8 RGB image H x W x 3 (the pipeline's output, round(clamp(x/2+0.5,0,1)*255)).
1. Border = all pixels within BORDER px of the image edge. Background reference colour =
   per-channel median of the border pixels (median of an even count = mean of the two middle values).
2. Shape region = pixels (anywhere, border included) whose Euclidean RGB distance to the background
   reference exceeds DIST. If fewer than MIN_PIXELS pixels qualify, no shape was found (disagree).
3. Shape colour = per-channel median of the region's pixels; both it and the background reference
   are classified as the nearest PALETTE entry (Euclidean RGB distance; ties -> first in order).
4. Position: centroid (mean column cx, mean row cy; pixel centres at integer coordinates 0..63) of
   the region. Each position word is a constraint: left cx < 26, right cx > 37, top cy < 26,
   bottom cy > 37, centre 20 <= cx <= 43 and 20 <= cy <= 43. "top left" = top and left, etc.
5. An image agrees with a held-out entry iff shape colour, background colour and all position
   constraints agree.
"""
import numpy as np

from dataset import PALETTE

BORDER = 2
DIST = 60.0
MIN_PIXELS = 20
PALETTE_ORDER = list(PALETTE)
POSITION_RULES = {
    "left": lambda cx, cy: cx < 26, "right": lambda cx, cy: cx > 37,
    "top": lambda cx, cy: cy < 26, "bottom": lambda cx, cy: cy > 37,
    "centre": lambda cx, cy: 20 <= cx <= 43 and 20 <= cy <= 43,
}


def nearest_colour(rgb):
    pal = np.array([PALETTE[k] for k in PALETTE_ORDER], np.float64)
    d = ((pal - np.asarray(rgb, np.float64)[None]) ** 2).sum(1)
    return PALETTE_ORDER[int(np.argmin(d))]


def measure(img):
    """Returns dict(background, shape_colour or None, cx, cy, pixels)."""
    img = np.asarray(img, np.float64)
    h, w, _ = img.shape
    border = np.ones((h, w), bool)
    border[BORDER:h - BORDER, BORDER:w - BORDER] = False
    bg = np.median(img[border], axis=0)
    dist = np.sqrt(((img - bg[None, None]) ** 2).sum(-1))
    region = dist > DIST
    out = {"background": nearest_colour(bg), "shape_colour": None, "cx": None, "cy": None,
           "pixels": int(region.sum())}
    if region.sum() >= MIN_PIXELS:
        ys, xs = np.nonzero(region)
        out["shape_colour"] = nearest_colour(np.median(img[region], axis=0))
        out["cx"], out["cy"] = float(xs.mean()), float(ys.mean())
    return out


def position_ok(position, cx, cy):
    if cx is None:
        return False
    return all(POSITION_RULES[word](cx, cy) for word in position.split())


def agrees(entry, m):
    """entry: a heldout.json prompt entry; m: measure(img). Returns (all, colours, position)."""
    colours = m["shape_colour"] == entry["shape_colour"] and m["background"] == entry["background"]
    pos = position_ok(entry["position"], m["cx"], m["cy"])
    return colours and pos, colours, pos
