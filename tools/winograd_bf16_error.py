"""How much error Winograd F(2x2,3x3) and F(4x4,3x3) add when the transformed input tiles and
weights are rounded to bf16 (what a bf16 GEMM over them takes), against a float64 direct 3x3
convolution; a direct convolution with bf16 inputs and weights for reference. 64 -> 64 channels
(TAESD's width), 24x24 output, N(0,1) input, N(0, 1/24^2) weights. Errors are relative to the
output's max |value|. Decided whether F(4x4,3x3) could speed up TAESD's bf16 decode (it cannot:
bench/results/README.md, session 8), and F(3x3,3x3) in between, its matrices built by Toom-Cook
from four interpolation points and infinity (toom_cook below; it reproduces F2 and F4 from their
points): 2.2e-2 at best, six times F(2x2)'s (session 26).

  /usr/bin/python3 tools/winograd_bf16_error.py
"""
import numpy as np

rng = np.random.default_rng(0)
CI = CO = 64
H = W = 24


def bf16(x):
    """Round to nearest even bf16, returned as float32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


x = rng.standard_normal((CI, H + 2, W + 2)).astype(np.float32)
w = (rng.standard_normal((CO, CI, 3, 3)) / 24).astype(np.float32)


def direct(xx, ww):
    out = np.zeros((CO, H, W))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("oc,chw->ohw", ww[:, :, dy, dx].astype(np.float64),
                             xx[:, dy:dy + H, dx:dx + W].astype(np.float64))
    return out


def winograd(m, BT, G, AT, rnd):
    """Output tiles m x m from (m+2) x (m+2) input patches: AT [sum_c (G g G^T) * (BT d BT^T)] AT^T."""
    a = m + 2
    U = rnd(np.einsum("ij,ocjk,lk->ocil", G, w.astype(np.float64), G).astype(np.float32)).astype(np.float64)
    out = np.zeros((CO, H, W))
    for ty in range(0, H, m):
        for tx in range(0, W, m):
            d = x[:, ty:ty + a, tx:tx + a].astype(np.float64)
            V = rnd(np.einsum("ij,cjk,lk->cil", BT, d, BT).astype(np.float32)).astype(np.float64)
            M = np.einsum("ocil,cil->oil", U, V)
            out[:, ty:ty + m, tx:tx + m] = np.einsum("ij,ojk,lk->oil", AT, M, AT)
    return out


F2 = (2, np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
      np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
      np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float))
F4 = (4, np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                   [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float),
      np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
      np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], float))


def toom_cook(m, points):
    """F(m, 3)'s (m, BT, G, AT) from the m + 1 finite interpolation points and infinity: AT's
    columns are the points' powers, G's rows the kernel's values at the points over the Lagrange
    denominators, BT's rows the coefficients of the products of (x - other points), and infinity's
    row of (x - every point)."""
    n = m + 2
    AT, G, BT = np.zeros((m, n)), np.zeros((n, 3)), np.zeros((n, n))
    for j, a in enumerate(points):
        others = [b for i, b in enumerate(points) if i != j]
        AT[:, j] = [a ** i for i in range(m)]
        G[j] = [a ** k / np.prod([a - b for b in others]) for k in range(3)]
        c = np.poly(others)[::-1] if others else np.ones(1)
        BT[j, :len(c)] = c
    AT[m - 1, n - 1] = G[n - 1, 2] = 1
    BT[n - 1] = np.poly(points)[::-1]
    return m, BT, G, AT


ref = direct(x, w)
scale = np.abs(ref).max()
print(f"direct, bf16 inputs and weights: relative error {np.abs(direct(bf16(x), bf16(w)) - ref).max() / scale:.1e}")
for name, f in (("F(2x2,3x3)", F2), ("F(4x4,3x3)", F4), ("F(2x2,3x3) by toom_cook", toom_cook(2, [0, 1, -1])),
                ("F(4x4,3x3) by toom_cook", toom_cook(4, [0, 1, -1, 2, -2])),
                ("F(3x3,3x3), points 0, 1, -1, 2", toom_cook(3, [0, 1, -1, 2])),
                ("F(3x3,3x3), points 0, 1, -1, -1/2", toom_cook(3, [0, 1, -1, -0.5]))):
    e32 = np.abs(winograd(*f, lambda v: v) - ref).max() / scale
    e16 = np.abs(winograd(*f, bf16) - ref).max() / scale
    print(f"Winograd {name}: relative error {e32:.1e} in f32, {e16:.1e} with bf16 tiles and weights")
