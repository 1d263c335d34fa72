"""Stage 1b: fine-tunes the VAE decoder (decoder + post_quant_conv; the encoder, and so the latents
the UNet trains on, stay frozen) on the cached latents, with the reconstruction loss weighted 5x
on shape pixels (pixels far from the image's border-median colour) so small shapes keep their
colour. Runs alongside train_unet.py. Resumable; writes work/vae_dec_ckpt.pt.

  nice -n 10 /usr/bin/python3 tools/demo-model/finetune_decoder.py --minutes 25
"""
import argparse
import csv
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import train_unet  # noqa: E402
import train_vae  # noqa: E402

CKPT = os.path.join(configs.WORK, "vae_dec_ckpt.pt")
LOG = os.path.join(configs.WORK, "vae_dec_loss.csv")


def shape_weights(u8):
    """1 on background, 5 on pixels whose RGB distance to the border-median colour exceeds 30."""
    x = u8.astype(np.float32)
    border = np.concatenate([x[:, :2].reshape(len(x), -1, 3), x[:, -2:].reshape(len(x), -1, 3),
                             x[:, :, :2].reshape(len(x), -1, 3), x[:, :, -2:].reshape(len(x), -1, 3)], 1)
    bg = np.median(border, axis=1)
    far = np.sqrt(((x - bg[:, None, None]) ** 2).sum(-1)) > 30
    return torch.from_numpy(1.0 + 4.0 * far.astype(np.float32))[:, None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=25.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    images = np.load(train_vae.DATA)["images"]
    lat = train_unet.ensure_latents()
    vae = train_unet.load_vae()
    params = list(vae.decoder.parameters()) + list(vae.post_quant_conv.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    torch.manual_seed(args.seed)
    step, used = 0, 0.0
    if os.path.exists(CKPT):
        ck = torch.load(CKPT)
        vae.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, used = ck["step"], ck["seconds"]
        torch.set_rng_state(ck["rng"])
        print(f"resumed at step {step}", flush=True)
    vae.train()
    budget = args.minutes * 60
    start, last_ckpt = time.time() - used, time.time()
    new_log = not os.path.exists(LOG)
    logf = open(LOG, "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "seconds", "lr", "weighted_l1", "mse"])
    acc, n_acc = np.zeros(2), 0
    while True:
        frac = min(1.0, (time.time() - start) / budget)
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, len(images), (args.batch,))
        u8 = images[idx.numpy()]
        x = train_vae.to_tensor(u8)
        w = shape_weights(u8)
        z = lat["mean"][idx] + torch.exp(0.5 * lat["logvar"][idx]) * torch.randn_like(lat["mean"][idx])
        rec = vae.decode(z)
        l1 = ((rec - x).abs() * w).sum() / (w.sum() * 3)
        mse = ((rec - x) ** 2 * w).sum() / (w.sum() * 3)
        loss = l1 + mse
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        acc += [l1.item(), mse.item()]
        n_acc += 1
        done = time.time() - start >= budget
        if step % 25 == 0 or done:
            a = acc / n_acc
            log.writerow([step, round(time.time() - start, 1), f"{lr:.3g}", f"{a[0]:.5f}", f"{a[1]:.5f}"])
            logf.flush()
            print(f"step {step} {(time.time() - start) / 60:.1f}min lr {lr:.2e} wl1 {a[0]:.4f} wmse {a[1]:.5f}", flush=True)
            acc[:], n_acc = 0, 0
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
