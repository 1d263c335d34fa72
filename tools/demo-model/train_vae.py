"""Stage 1: builds the dataset + tokenizer, then trains the AutoencoderKL (reconstruction L1+L2
plus a small KL term). Resumable: checkpoints to work/vae_ckpt.pt every few minutes and stops
when the wall-clock budget (--minutes, counted across resumes) is used up.

  nice -n 10 /usr/bin/python3 tools/demo-model/train_vae.py --minutes 12
  nice -n 10 /usr/bin/python3 tools/demo-model/train_vae.py --version 2 --minutes 25 --shape-weight 4
(--version 2: configs.py's factor-4 VAE, synonym captions, files in work/v2/.)
"""
import argparse
import csv
import os
import sys
import time

import numpy as np

# Other engineers compile on the same 2 cores: OpenMP threads that spin-wait while descheduled
# make a niced job ~10x slower, so wait passively and keep OpenBLAS single-threaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clip_tokenizer  # noqa: E402
import configs  # noqa: E402
import dataset  # noqa: E402
import models  # noqa: E402

DATA = os.path.join(configs.WORK, "data.npz")
CKPT = os.path.join(configs.WORK, "vae_ckpt.pt")
LOG = os.path.join(configs.WORK, "vae_loss.csv")


def ensure_data(n, seed):
    if not os.path.exists(DATA):
        t = time.time()
        imgs, caps = dataset.make_dataset(n, seed, synonyms=configs.SYNONYMS)
        np.savez(DATA, images=imgs, captions=np.array(caps))
        print(f"dataset: {n} images (seed {seed}) in {time.time() - t:.0f}s", flush=True)
    if not os.path.exists(os.path.join(configs.TOKENIZER_DIR, "vocab.json")):
        nv, nm = clip_tokenizer.learn_bpe(dataset.caption_corpus(synonyms=configs.SYNONYMS), configs.TOKENIZER_DIR)
        print(f"tokenizer: vocab {nv} ({nm} merges)", flush=True)
    d = np.load(DATA)
    return d["images"], list(d["captions"])


def to_tensor(u8):
    return torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def shape_weights(u8, extra=4.0, edge=0.0):
    """Per-pixel loss weight [B,1,H,W]: 1 on background, 1 + extra on pixels whose RGB distance to
    the image's border-median colour exceeds 30 (the shape), + edge within 2 px of the shape's
    outline (star points, triangle corners and ring holes are all outline)."""
    x = u8.astype(np.float32)
    border = np.concatenate([x[:, :2].reshape(len(x), -1, 3), x[:, -2:].reshape(len(x), -1, 3),
                             x[:, :, :2].reshape(len(x), -1, 3), x[:, :, -2:].reshape(len(x), -1, 3)], 1)
    bg = np.median(border, axis=1)
    far = torch.from_numpy((np.sqrt(((x - bg[:, None, None]) ** 2).sum(-1)) > 30).astype(np.float32))[:, None]
    w = 1.0 + extra * far
    if edge:
        band = F.max_pool2d(far, 5, 1, 2) + F.max_pool2d(-far, 5, 1, 2)  # dilated minus eroded mask
        w = w + edge * band
    return w


def small_shape_renders(rng, n):
    """n fresh single small shapes (radius 8-10.5 px, random colours, backgrounds, positions), half of them
    stars and a fifth rings: the details (star points, ring holes) a factor-4 VAE learns last."""
    shapes = rng.choice(dataset.SHAPES, n, p=[0.1, 0.1, 0.1, 0.5, 0.2])
    out = np.empty((n, dataset.SIZE, dataset.SIZE, 3), np.uint8)
    heldout = dataset.load_heldout()
    for i, shape in enumerate(shapes):
        while True:  # the held-out (colour, shape, background) combinations stay unseen, as in dataset.sample
            bg = dataset.BACKGROUNDS[rng.integers(len(dataset.BACKGROUNDS))]
            col = [c for c in dataset.SHAPE_COLOURS if c != bg][rng.integers(5)]
            if (col, shape, bg) not in heldout:
                break
        img = dataset.background(rng, bg)
        px, py = list(dataset.POSITIONS.values())[rng.integers(9)]
        dataset.paint(img, dataset.shape_mask(shape, px + rng.uniform(-3, 3), py + rng.uniform(-3, 3),
                                              rng.uniform(*dataset.SIZES["small"]), rng.uniform(-0.3, 0.3)), col)
        out[i] = np.clip(np.rint(img), 0, 255)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--n-images", type=int, default=24000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape-weight", type=float, default=0.0,
                    help="extra reconstruction weight on shape pixels (as finetune_decoder.shape_weights; 0 = off)")
    ap.add_argument("--edge-weight", type=float, default=0.0,
                    help="extra reconstruction weight within 2 px of the shape outline (0 = off)")
    ap.add_argument("--mix-small", type=int, default=0,
                    help="images per batch replaced by fresh small-shape renders (small_shape_renders)")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(configs.WORK, exist_ok=True)
    images, _ = ensure_data(args.n_images, args.seed)

    torch.manual_seed(args.seed)
    vae = models.AutoencoderKL(configs.vae_config())
    opt = torch.optim.AdamW(vae.parameters(), lr=args.lr, weight_decay=0.0)
    step, used = 0, 0.0
    if os.path.exists(CKPT):
        ck = torch.load(CKPT)
        vae.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, used = ck["step"], ck["seconds"]
        torch.set_rng_state(ck["rng"])
        print(f"resumed at step {step}, {used / 60:.1f} min used", flush=True)
    print(f"vae params {models.count_params(vae):,}", flush=True)
    budget = args.minutes * 60
    gen = np.random.default_rng(args.seed * 1000 + step)
    start, last_ckpt = time.time() - used, time.time()
    new_log = not os.path.exists(LOG)
    logf = open(LOG, "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "seconds", "lr", "l1", "mse", "kl"])
    acc = np.zeros(3)
    n_acc = 0
    while True:
        elapsed = time.time() - start
        # cosine decay over the wall-clock budget, short warm-up
        frac = min(1.0, elapsed / budget)
        lr = args.lr * min(1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        u8 = images[gen.integers(0, len(images), args.batch)]
        if args.mix_small:
            u8[:args.mix_small] = small_shape_renders(gen, args.mix_small)
        x = to_tensor(u8)
        mean, logvar = vae.encode(x)
        z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
        rec = vae.decode(z)
        if args.shape_weight or args.edge_weight:
            w = shape_weights(u8, args.shape_weight, args.edge_weight)
            l1 = ((rec - x).abs() * w).sum() / (w.sum() * 3)
            mse = ((rec - x) ** 2 * w).sum() / (w.sum() * 3)
        else:
            l1 = (rec - x).abs().mean()
            mse = F.mse_loss(rec, x)
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).sum(dim=(1, 2, 3)).mean()
        loss = l1 + mse + args.kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        acc += [l1.item(), mse.item(), kl.item()]
        n_acc += 1
        done = time.time() - start >= budget
        if step % 25 == 0 or done:
            a = acc / n_acc
            log.writerow([step, round(time.time() - start, 1), f"{lr:.3g}", f"{a[0]:.5f}", f"{a[1]:.5f}", f"{a[2]:.2f}"])
            logf.flush()
            print(f"step {step} {(time.time() - start) / 60:.1f}min lr {lr:.2e} l1 {a[0]:.4f} mse {a[1]:.5f} kl {a[2]:.1f}",
                  flush=True)
            acc[:] = 0
            n_acc = 0
        if done or time.time() - last_ckpt > 180:
            torch.save({"model": vae.state_dict(), "opt": opt.state_dict(), "step": step,
                        "seconds": time.time() - start, "rng": torch.get_rng_state()}, CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
            last_ckpt = time.time()
        if done:
            break
    print(f"done: {step} steps in {(time.time() - start) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
