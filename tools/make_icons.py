#!/usr/bin/env python3
"""Draws Octodiff's application icon: a 2x4 grid of tiles (the app's eight-image grid) going from
noise (left) to flat colour (right), on a dark rounded square. Writes the scalable SVG and PNGs
of the hicolor sizes into packaging/linux/icons/. Run with Debian's /usr/bin/python3 (PIL)."""
import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "packaging/linux/icons")
COLOURS = [(231, 76, 60), (241, 196, 15), (46, 204, 113), (52, 152, 219),
           (155, 89, 182), (230, 126, 34), (26, 188, 156), (236, 240, 241)]
BACKGROUND = (34, 40, 49)


def tiles(size):
    """(x0, y0, x1, y1, colour, noise) per tile for an icon of `size` pixels."""
    margin, gap = size * 0.10, size * 0.05
    w = (size - 2 * margin - 3 * gap) / 4  # square tiles, the grid centred
    top = (size - (2 * w + gap)) / 2
    out = []
    for row in range(2):
        for col in range(4):
            x0, y0 = margin + col * (w + gap), top + row * (w + gap)
            out.append((x0, y0, x0 + w, y0 + w, COLOURS[row * 4 + col], 1.0 - col / 3.0))
    return out


def svg():
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256" viewBox="0 0 256 256">',
             '<rect x="8" y="8" width="240" height="240" rx="40" fill="rgb%s"/>' % (BACKGROUND,)]
    rng = random.Random(8)
    for x0, y0, x1, y1, colour, noise in tiles(256):
        parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="rgb%s"/>'
                     % (x0, y0, x1 - x0, y1 - y0, colour))
        for _ in range(int(noise * 14)):  # specks of noise on the early tiles
            px, py = rng.uniform(x0 + 3, x1 - 6), rng.uniform(y0 + 3, y1 - 6)
            grey = rng.randint(0, 255)
            parts.append('<rect x="%.1f" y="%.1f" width="4" height="4" fill="rgb(%d,%d,%d)"/>' % (px, py, grey, grey, grey))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def png(size):
    scale = 4  # draw large, then downsample for smooth edges
    big = size * scale
    im = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    d = ImageDraw.Draw(im)
    d.rounded_rectangle([big * 0.03, big * 0.03, big * 0.97, big * 0.97], radius=big * 0.16, fill=BACKGROUND)
    rng = random.Random(8)
    for x0, y0, x1, y1, colour, noise in tiles(big):
        d.rounded_rectangle([x0, y0, x1, y1], radius=big * 0.025, fill=colour)
        for _ in range(int(noise * 14)):
            px, py = rng.uniform(x0 + 3 * scale, x1 - 6 * scale), rng.uniform(y0 + 3 * scale, y1 - 6 * scale)
            grey = rng.randint(0, 255)
            d.rectangle([px, py, px + big / 64, py + big / 64], fill=(grey, grey, grey))
    return im.resize((size, size), Image.LANCZOS)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "octodiff.svg").write_text(svg())
    for size in (48, 64, 128, 256):
        png(size).save(OUT / ("octodiff-%d.png" % size), optimize=True)


if __name__ == "__main__":
    main()
