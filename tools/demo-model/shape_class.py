"""Shape-class measurement (issue 20.7: "red star -> red blob, ring without hole"): which of
circle / square / triangle / star / ring the measured shape region looks like.

Rule (deterministic, numpy; meant to be re-implementable in the C++ statistics test):
1. Shape region R = measure.py's region (RGB distance to the border median > 60). No shape -> None.
2. Holes: F = R with its holes filled (pixels not 4-connected to the image border through non-R
   pixels are added). hole_fraction = (|F| - |R|) / |F|.
3. Centroid (cx, cy) and size from F: the radius r_k for each class k is chosen so that the class's
   filled area at radius r_k equals |F| (filled areas per unit radius², measured once on 4×
   supersampled renders of dataset.shape_mask: circle = ring = π, square (1.7)², triangle, star).
4. For every class k and rotation θ in {-0.3, -0.15, 0, 0.15, 0.3} (the dataset draws θ in ±0.3)
   render the class's binary mask (dataset.shape_mask at (cx, cy, r_k, θ), coverage ≥ 0.5), ring
   unfilled. Score = IoU(mask, R) (R as measured, with any hole). The class with the best IoU wins
   (ties: order circle, square, triangle, star, ring).

Why IoU against templates: star points, triangle corners and the ring's hole each change the IoU
by 0.1–0.3 against the wrong class, while the VAE's soft edges erode all classes alike. The rule is
checked on ground-truth renders and on their VAE reconstructions (tools/demo-model/eval_fast.py).
"""
import numpy as np

import dataset
import measure

SHAPES = ["circle", "square", "triangle", "star", "ring"]
ROTATIONS = (-0.3, -0.15, 0.0, 0.15, 0.3)
_AREA_PER_R2 = {}


def area_per_r2(shape):
    """Filled area of the class at radius 1 (pixels / r²), from a supersampled render at r = 20."""
    if shape not in _AREA_PER_R2:
        filled = "circle" if shape == "ring" else shape
        m = dataset.shape_mask(filled, 32.0, 32.0, 20.0, 0.0)
        _AREA_PER_R2[shape] = float(m.sum()) / 400.0
    return _AREA_PER_R2[shape]


def fill_holes(region):
    """Adds to the region every pixel not 4-connected to the border through non-region pixels."""
    h, w = region.shape
    outside = np.zeros_like(region)
    stack = [(y, x) for y in range(h) for x in (0, w - 1) if not region[y, x]]
    stack += [(y, x) for x in range(w) for y in (0, h - 1) if not region[y, x]]
    while stack:
        y, x = stack.pop()
        if outside[y, x] or region[y, x]:
            continue
        outside[y, x] = True
        for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            ny, nx = y + dy, x + dx
            if 0 <= ny < h and 0 <= nx < w and not outside[ny, nx] and not region[ny, nx]:
                stack.append((ny, nx))
    return ~outside


def region_of(img):
    img = np.asarray(img, np.float64)
    h, w, _ = img.shape
    border = np.ones((h, w), bool)
    border[measure.BORDER:h - measure.BORDER, measure.BORDER:w - measure.BORDER] = False
    bg = np.median(img[border], axis=0)
    return np.sqrt(((img - bg[None, None]) ** 2).sum(-1)) > measure.DIST


def classify(img):
    """Returns dict(shape or None, iou per class, hole_fraction)."""
    region = region_of(img)
    if region.sum() < measure.MIN_PIXELS:
        return {"shape": None, "iou": {}, "hole_fraction": 0.0}
    filled = fill_holes(region)
    ys, xs = np.nonzero(filled)
    cx, cy, area = xs.mean() + 0.5, ys.mean() + 0.5, float(filled.sum())  # shape_mask: pixel centres at +0.5
    ious = {}
    for k in SHAPES:
        r = np.sqrt(area / area_per_r2(k))
        best = 0.0
        for rot in ROTATIONS:
            m = dataset.shape_mask(k, cx, cy, r, rot) >= 0.5
            inter, union = np.logical_and(m, region).sum(), np.logical_or(m, region).sum()
            best = max(best, inter / union)
        ious[k] = float(best)
    shape = max(SHAPES, key=lambda k: (ious[k], -SHAPES.index(k)))
    return {"shape": shape, "iou": ious, "hole_fraction": (area - region.sum()) / area}
