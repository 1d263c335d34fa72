"""Draws the loss curves (work/vae_loss.csv, work/unet_loss.csv) into loss_curves.png with PIL and
copies the CSVs next to the README (logs/)."""
import csv
import os
import shutil

from PIL import Image, ImageDraw

import configs

LOGS = os.path.join(configs.HERE, "logs")


def read(path, cols):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [int(r["step"]) for r in rows], {c: [float(r[c]) for r in rows] for c in cols}


def panel(draw, box, title, steps, series, log_y=True):
    import math
    x0, y0, x1, y1 = box
    draw.rectangle(box, outline=(0, 0, 0))
    draw.text((x0 + 6, y0 + 4), title, fill=(0, 0, 0))
    vals = [v for s in series.values() for v in s if v > 0]
    f = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    lo, hi = f(min(vals)), f(max(vals))
    hi = hi if hi > lo else lo + 1
    colours = [(200, 30, 30), (30, 90, 200), (30, 150, 60)]
    for k, (name, s) in enumerate(series.items()):
        pts = [(x0 + 40 + (x1 - x0 - 50) * (st / max(steps)), y1 - 20 - (y1 - y0 - 40) * (f(v) - lo) / (hi - lo))
               for st, v in zip(steps, s) if v > 0]
        draw.line(pts, fill=colours[k], width=2)
        draw.text((x1 - 150, y0 + 4 + 12 * k), name, fill=colours[k])
    draw.text((x0 + 2, y0 + 20), f"{10 ** hi if log_y else hi:.3g}", fill=(0, 0, 0))
    draw.text((x0 + 2, y1 - 30), f"{10 ** lo if log_y else lo:.3g}", fill=(0, 0, 0))
    draw.text((x1 - 60, y1 - 14), f"step {max(steps)}", fill=(0, 0, 0))


def main():
    os.makedirs(LOGS, exist_ok=True)
    img = Image.new("RGB", (1350, 340), (255, 255, 255))
    d = ImageDraw.Draw(img)
    for name in ("vae_loss.csv", "vae_dec_loss.csv", "unet_loss.csv", "vae_loss_groups16_abandoned.csv"):
        shutil.copy(os.path.join(configs.WORK, name), os.path.join(LOGS, name))
    s, v = read(os.path.join(LOGS, "vae_loss.csv"), ["l1", "mse"])
    panel(d, (10, 10, 440, 330), "1. VAE reconstruction (log y)", s, v)
    s, v = read(os.path.join(LOGS, "vae_dec_loss.csv"), ["weighted_l1", "mse"])
    panel(d, (460, 10, 890, 330), "1b. decoder fine-tune, shape-weighted (log y)", s, v)
    s, u = read(os.path.join(LOGS, "unet_loss.csv"), ["mse", "weighted_loss"])
    panel(d, (910, 10, 1340, 330), "2. UNet+text encoder eps loss (log y)", s, u)
    img.save(os.path.join(configs.HERE, "loss_curves.png"))


if __name__ == "__main__":
    main()
