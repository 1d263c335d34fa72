"""Stage 2: trains the CLIP text encoder and the UNet jointly on epsilon-prediction MSE in the
latent space of the (frozen) stage-1 VAE, with 10% caption dropout (empty prompt) for CFG.

On first run it encodes the whole dataset with the VAE (posterior mean + logvar) and measures
the latent std -> scaling_factor = 1/std. Resumable: checkpoint work/unet_ckpt.pt every ~3 min;
stops when the wall-clock budget (--minutes, counted across resumes) is spent.

  nice -n 10 /usr/bin/python3 tools/demo-model/train_unet.py --minutes 60
  nice -n 10 /usr/bin/python3 tools/demo-model/train_unet.py --version 2 --minutes 50   # work/v2/
"""
import argparse
import copy
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

V_PREDICTION = False  # set in main() from the scheduler config
import configs  # noqa: E402
import models  # noqa: E402
import sampling  # noqa: E402
import train_vae  # noqa: E402

LATENTS = os.path.join(configs.WORK, "latents.pt")
CKPT = os.path.join(configs.WORK, "unet_ckpt.pt")
LOG = os.path.join(configs.WORK, "unet_loss.csv")


def load_vae():
    ck = torch.load(train_vae.CKPT)
    vae = models.AutoencoderKL(configs.vae_config())
    vae.load_state_dict(ck["model"])
    return vae.eval()


@torch.no_grad()
def ensure_latents():
    if os.path.exists(LATENTS):
        return torch.load(LATENTS)
    t0 = time.time()
    d = np.load(train_vae.DATA)
    vae = load_vae()
    means, logvars = [], []
    for i in range(0, len(d["images"]), 256):
        m, lv = vae.encode(train_vae.to_tensor(d["images"][i:i + 256]))
        means.append(m)
        logvars.append(lv)
    mean, logvar = torch.cat(means), torch.cat(logvars)
    g = torch.Generator().manual_seed(0)
    z = mean + torch.exp(0.5 * logvar) * torch.randn(mean.shape, generator=g)
    tok = clip_tokenizer.CLIPTokenizer(configs.TOKENIZER_DIR)
    ids = torch.tensor([tok.encode_padded(c) for c in d["captions"]])
    out = {"mean": mean, "logvar": logvar, "ids": ids, "empty_ids": torch.tensor(tok.encode_padded("")),
           "std": float(z.std()), "channel_mean": z.mean(dim=(0, 2, 3)).tolist(),
           "channel_std": z.std(dim=(0, 2, 3)).tolist(), "vocab_size": len(tok.vocab)}
    torch.save(out, LATENTS)
    print(f"encoded {len(mean)} images in {time.time() - t0:.0f}s; latent std {out['std']:.4f} "
          f"(scaling_factor {1 / out['std']:.5f}), channel means {np.round(out['channel_mean'], 3).tolist()}, "
          f"mean posterior std {float(torch.exp(0.5 * logvar).mean()):.4f}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--drop", type=float, default=0.1, help="caption dropout probability")
    ap.add_argument("--offset-noise", type=float, default=0.1)
    ap.add_argument("--snr-gamma", type=float, default=5.0, help="min-SNR loss weighting (0 = off)")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--ckpt-every", type=float, default=3.0, help="minutes between checkpoints")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(2)
    lat = ensure_latents()
    scale = 1.0 / lat["std"]

    torch.manual_seed(args.seed)
    te = models.CLIPTextModel(configs.text_encoder_config(lat["vocab_size"]))
    unet = models.UNet2DConditionModel(configs.unet_config())
    params = list(te.parameters()) + list(unet.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-2)
    ema = copy.deepcopy({"te": te.state_dict(), "unet": unet.state_dict()})
    step, used = 0, 0.0
    if os.path.exists(CKPT):
        ck = torch.load(CKPT)
        te.load_state_dict(ck["te"])
        unet.load_state_dict(ck["unet"])
        opt.load_state_dict(ck["opt"])
        ema = ck["ema"]
        step, used = ck["step"], ck["seconds"]
        torch.set_rng_state(ck["rng"])
        print(f"resumed at step {step}, {used / 60:.1f} min used", flush=True)
    print(f"text encoder params {models.count_params(te):,}, unet params {models.count_params(unet):,}, "
          f"scaling_factor {scale:.5f}", flush=True)

    ac = sampling.alphas_cumprod(configs.scheduler_config())
    global V_PREDICTION
    V_PREDICTION = configs.scheduler_config().get("prediction_type", "epsilon") == "v_prediction"
    print(f"objective: {'v (unweighted)' if V_PREDICTION else 'epsilon'}", flush=True)
    snr = ac / (1 - ac)
    n = len(lat["ids"])
    budget = args.minutes * 60
    start, last_ckpt = time.time() - used, time.time()
    new_log = not os.path.exists(LOG)
    logf = open(LOG, "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "seconds", "lr", "mse", "weighted_loss"])
    acc, n_acc = np.zeros(2), 0
    while True:
        frac = min(1.0, (time.time() - start) / budget)
        lr = args.lr * min(1.0, (step + 1) / 200) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, n, (args.batch,))
        mean, logvar = lat["mean"][idx], lat["logvar"][idx]
        z = (mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)) * scale
        ids = lat["ids"][idx].clone()
        drop = torch.rand(args.batch) < args.drop
        ids[drop] = lat["empty_ids"]
        t = torch.randint(0, 1000, (args.batch,))
        noise = torch.randn_like(z)
        if args.offset_noise:
            noise = noise + args.offset_noise * torch.randn(z.shape[0], z.shape[1], 1, 1)
        a = ac[t][:, None, None, None]
        zt = a.sqrt() * z + (1 - a).sqrt() * noise
        pred = unet(zt, t, te(ids))
        if V_PREDICTION:  # v = sqrt(a) eps - sqrt(1-a) x0, unweighted (x0 errors count SNR + 1 times)
            per = F.mse_loss(pred, a.sqrt() * noise - (1 - a).sqrt() * z, reduction="none").mean(dim=(1, 2, 3))
        else:
            per = F.mse_loss(pred, noise, reduction="none").mean(dim=(1, 2, 3))
        if args.snr_gamma and not V_PREDICTION:
            w = torch.clamp(snr[t], max=args.snr_gamma) / snr[t]
            loss = (per * w).mean()
        else:
            loss = per.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for key, mod in (("te", te), ("unet", unet)):
                for name, p in mod.state_dict().items():
                    ema[key][name].mul_(decay).add_(p, alpha=1 - decay)
        acc += [per.mean().item(), loss.item()]
        n_acc += 1
        done = time.time() - start >= budget
        if step % 25 == 0 or done:
            a_ = acc / n_acc
            log.writerow([step, round(time.time() - start, 1), f"{lr:.3g}", f"{a_[0]:.5f}", f"{a_[1]:.5f}"])
            logf.flush()
            print(f"step {step} {(time.time() - start) / 60:.1f}min lr {lr:.2e} mse {a_[0]:.4f} weighted {a_[1]:.4f}",
                  flush=True)
            acc[:], n_acc = 0, 0
        if done or time.time() - last_ckpt > 60 * args.ckpt_every:
            torch.save({"te": te.state_dict(), "unet": unet.state_dict(), "opt": opt.state_dict(), "ema": ema,
                        "step": step, "seconds": time.time() - start, "rng": torch.get_rng_state(),
                        "scaling_factor": scale, "args": vars(args)}, CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
            last_ckpt = time.time()
        if done:
            break
    print(f"done: {step} steps in {(time.time() - start) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
