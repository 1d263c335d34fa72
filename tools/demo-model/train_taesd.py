"""A tiny autoencoder (TAESD, diffusers AutoencoderTiny layout) for the demo model, distilled from
the shipped demo VAE (resources/demo-model/vae), or with --version 2 from the version-2 VAE of the
staging folder work/v2/export (factor 4: 16x16x4 latents, so one up/down-sampling stage fewer:
num_encoder_blocks (1,3,3), num_decoder_blocks (3,3,1); output work/v2/export/taesd, results eval/v2/):

- decoder: UNet latents AS THE UNET PRODUCES THEM (the VAE's latents x its scaling_factor, v1 0.70969;
  TAESD's own scaling_factor is 1.0, so the engine's AutoencoderTiny::decode_nhwc takes the
  pipeline's final latents unchanged) -> the image the demo VAE decodes from them.
  Loss: L1 + MSE against VAE.decode(latents / 0.70969) in [-1, 1]. Inputs: posterior samples of the
  dataset images, 25 % of them with extra Gaussian noise (intermediate latents of the live preview).
- encoder: image in [-1, 1] -> the VAE's posterior mean x scaling_factor (MSE).

Resumable (work/taesd_ckpt.pt every ~3 min, wall-clock budget across resumes); at the end writes
resources/demo-model/taesd/{config.json, diffusion_pytorch_model.safetensors} (float32).

  nice -n 5 /usr/bin/python3 tools/demo-model/train_taesd.py --minutes 18
  /usr/bin/python3 tools/demo-model/train_taesd.py --eval-only        # measurements for the README
  nice -n 5 /usr/bin/python3 tools/demo-model/train_taesd.py --version 2 --minutes 20 --batch 16
"""
import argparse
import csv
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import safetensors.torch  # noqa: E402,F401  (save_pretrained uses safetensors.torch)
from diffusers import AutoencoderTiny  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402
import shipped_data  # noqa: E402
import train_vae  # noqa: E402
from eval_fast import score  # noqa: E402
from vae_shape_check import balanced_renders, shape_score  # noqa: E402

# --target vae (the shipped TAESD, a stand-in for the VAE decoder) or --target images (an
# experiment: a decoder trained on the dataset images themselves from the same latents, i.e. a
# sharper decoder than the VAE's; see README "Shapes").
PATHS = {"vae": ("taesd_ckpt.pt", "taesd_loss.csv", os.path.join(shipped_data.MODEL, "taesd"), "taesd"),
         "images": ("taesd_sharp_ckpt.pt", "taesd_sharp_loss.csv",
                    os.path.join(configs.WORK, "taesd-sharp"), "taesd_sharp")}
CKPT, LOG, OUT, TAG = None, None, None, None
EVAL = configs.EVAL
# One stage per VAE resolution level: the first encoder stage and the last decoder stage work at
# full resolution, each other stage halves / doubles it (v1: 4 stages = factor 8, v2: 3 = factor 4).
STAGES = len(configs.VAE_BLOCKS)
ENCODER_BLOCKS = (1, 3, 3, 3)[:STAGES]
DECODER_BLOCKS = (3, 3, 3, 1)[-STAGES:]


def make_taesd(channels):
    return AutoencoderTiny(encoder_block_out_channels=(channels,) * STAGES,
                           decoder_block_out_channels=(channels,) * STAGES, latent_channels=4,
                           num_encoder_blocks=ENCODER_BLOCKS, num_decoder_blocks=DECODER_BLOCKS)


def train_batch(pipe, lat, images, gen, args):
    """(scaled latents for the decoder, images + scaled posterior means for the encoder, which inputs got
    extra noise, the uint8 images). With --mix-small the first k images are fresh small-shape renders
    (train_vae.small_shape_renders), encoded by the VAE here."""
    batch = args.batch
    idx = torch.from_numpy(gen.integers(0, len(images), batch))
    sf = lat["scaling_factor"]
    u8 = images[idx.numpy()]
    mean, logvar = lat["mean"][idx], lat["logvar"][idx]
    if args.mix_small:
        u8[:args.mix_small] = train_vae.small_shape_renders(gen, args.mix_small)
        with torch.no_grad():
            mean[:args.mix_small], logvar[:args.mix_small] = pipe.vae.encode(shipped_data.to_tensor(u8[:args.mix_small]))
    z = (mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)) * sf
    noisy = torch.rand(batch) < args.noisy
    z[noisy] += torch.rand(int(noisy.sum()), 1, 1, 1) * 0.6 * torch.randn_like(z[noisy])
    return z, shipped_data.to_tensor(u8), mean * sf, noisy, u8


def decoder_loss(rec, target, u8, args):
    """L1 + MSE, per pixel weighted as train_vae.py with --shape-weight / --edge-weight."""
    if not (args.shape_weight or args.edge_weight):
        return (rec - target).abs().mean(), F.mse_loss(rec, target)
    w = train_vae.shape_weights(u8, args.shape_weight, args.edge_weight)
    return ((rec - target).abs() * w).sum() / (w.sum() * 3), ((rec - target) ** 2 * w).sum() / (w.sum() * 3)


def train(args, pipe, lat, images):
    torch.manual_seed(args.seed)
    taesd = make_taesd(args.channels)
    opt = torch.optim.AdamW(taesd.parameters(), lr=args.lr, weight_decay=0.0)
    step, used = 0, 0.0
    if os.path.exists(CKPT):
        ck = torch.load(CKPT)
        taesd.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, used = ck["step"], ck["seconds"]
        print(f"resumed at step {step}, {used / 60:.1f} min used", flush=True)
    elif args.init:
        taesd.load_state_dict(torch.load(os.path.join(configs.WORK, args.init))["model"])
        print(f"weights initialised from work/{args.init}", flush=True)
    print(f"taesd params {sum(p.numel() for p in taesd.parameters()):,}", flush=True)
    gen = np.random.default_rng(args.seed * 1000 + step)
    budget, start, last_ckpt = args.minutes * 60, time.time() - used, time.time()
    new_log = not os.path.exists(LOG)
    logf = open(LOG, "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "seconds", "lr", "dec_l1", "dec_mse", "enc_mse"])
    acc, n_acc = np.zeros(3), 0
    while True:
        frac = min(1.0, (time.time() - start) / budget)
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        z, x, target_lat, noisy, u8 = train_batch(pipe, lat, images, gen, args)
        with torch.no_grad():
            target = pipe.vae.decode(z / lat["scaling_factor"])
            if args.target == "images":  # the image itself, except for the extra-noise inputs
                target[~noisy] = x[~noisy]
        rec = taesd.decode(z).sample
        l1, mse = decoder_loss(rec, target, u8, args)
        enc = F.mse_loss(taesd.encode(x).latents, target_lat)
        loss = l1 + mse + enc
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        acc += [l1.item(), mse.item(), enc.item()]
        n_acc += 1
        done = time.time() - start >= budget
        if step % 25 == 0 or done:
            a = acc / n_acc
            log.writerow([step, round(time.time() - start, 1), f"{lr:.3g}", f"{a[0]:.5f}", f"{a[1]:.5f}", f"{a[2]:.5f}"])
            logf.flush()
            print(f"step {step} {(time.time() - start) / 60:.1f}min lr {lr:.2e} dec l1 {a[0]:.4f} mse {a[1]:.5f} "
                  f"enc mse {a[2]:.4f}", flush=True)
            acc[:], n_acc = 0, 0
        if done or time.time() - last_ckpt > 180:
            torch.save({"model": taesd.state_dict(), "opt": opt.state_dict(), "step": step,
                        "seconds": time.time() - start, "channels": args.channels}, CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
            last_ckpt = time.time()
        if done:
            break
    print(f"done: {step} steps in {(time.time() - start) / 60:.1f} min", flush=True)
    return taesd.eval()


def export(taesd):
    taesd.save_pretrained(OUT, safe_serialization=True)
    with open(os.path.join(OUT, "config.json")) as f:
        cfg = json.load(f)
    print(f"wrote {OUT}: {os.path.getsize(os.path.join(OUT, 'diffusion_pytorch_model.safetensors')) / 1e6:.2f} MB, "
          f"scaling_factor {cfg['scaling_factor']}", flush=True)


def load_exported():
    return AutoencoderTiny.from_pretrained(OUT).eval()


def psnr(a, b):
    mse = ((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean()
    return 10 * np.log10(255.0 ** 2 / mse)


def recon_measures(pipe, taesd):
    """(1) reconstruction on 256 fresh shapes-world images (seed 99, never trained on)."""
    imgs, _ = dataset.make_dataset(256, 99)
    x = shipped_data.to_tensor(imgs)
    mean, _ = pipe.vae.encode(x)
    z = mean * pipe.vae.config["scaling_factor"]
    vae_img, tae_img = pipe.decode(z), sampling.to_images(taesd.decode(z).sample)
    vae_f, tae_f = pipe.decode(z, True), sampling.to_images(taesd.decode(z).sample, True)
    enc = taesd.encode(x).latents
    rt = pipe.decode(enc)
    res = {"recon_images": len(imgs),
           "decoder_vs_vae_mean_abs_u8": float(np.abs(vae_img.astype(float) - tae_img).mean()),
           "decoder_vs_vae_max_abs": float(np.abs(vae_f - tae_f).max()),
           "decoder_vs_vae_psnr_db": float(psnr(vae_img, tae_img)),
           "vae_vs_original_psnr_db": float(psnr(imgs, vae_img)),
           "taesd_vs_original_psnr_db": float(psnr(imgs, tae_img)),
           "encoder_latent_rmse": float(((enc - z) ** 2).mean().sqrt()), "latent_std": float(z.std()),
           "taesd_encode_vae_decode_psnr_db": float(psnr(imgs, rt)),
           "colours_same_as_vae": int(sum(measure.measure(a)["shape_colour"] == measure.measure(b)["shape_colour"]
                                          and measure.measure(a)["background"] == measure.measure(b)["background"]
                                          for a, b in zip(vae_img, tae_img)))}
    return res, np.concatenate([imgs[:8], vae_img[:8], tae_img[:8]])


def shape_measures(pipe, taesd):
    """(2) vae_shape_check.py's acceptance set (100 balanced single-shape renders, seed 99): shape class
    of the VAE's and TAESD's decodes of the VAE's posterior means, and of TAESD encode -> TAESD decode."""
    imgs, shapes = balanced_renders(100, 99)
    x = shipped_data.to_tensor(imgs)
    z = pipe.vae.encode(x)[0] * pipe.vae.config["scaling_factor"]
    decs = {"ground_truth": imgs, "vae_decode": pipe.decode(z),
            "taesd_decode_of_vae_latents": sampling.to_images(taesd.decode(z).sample),
            "taesd_encode_taesd_decode": sampling.to_images(taesd.decode(taesd.encode(x).latents).sample)}
    res = {f"shape_class_seed99_{k}": shape_score(v, shapes) for k, v in decs.items()}
    return res, np.concatenate([v[:10] for v in decs.values()])


def heldout_measures(pipe, taesd, sampler, steps, seeds=4):
    """(3) the held-out prompts' latents (g 7.5) decoded by the VAE and by TAESD, measured with
    evaluate.py's rule (+ shape class)."""
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        entries = json.load(f)["prompts"]
    E = [e for e in entries for _ in range(seeds)]
    lat = pipe.generate([e["prompt"] for e in E], [s for _ in entries for s in range(seeds)], guidance=7.5,
                        steps=steps, sampler=sampler, output="latents")
    res, run = {}, f"{sampler}{steps}"
    vae_u8, tae_u8 = pipe.decode(lat), sampling.to_images(taesd.decode(lat).sample)
    for name, im in (("vae", vae_u8), ("taesd", tae_u8)):
        sc = score(E, im, True)
        res[f"heldout_{run}_{name}"] = {k: sc[k] for k in ("agreement", "colours", "position", "shape_class")}
    res["heldout_taesd_vs_vae_mean_abs_u8"] = float(np.abs(tae_u8.astype(float) - vae_u8).mean())
    return res


@torch.no_grad()
def evaluate(pipe, taesd, seeds=4):
    res, grid = recon_measures(pipe, taesd)
    shp, shape_grid = shape_measures(pipe, taesd)
    res.update(shp)
    # v1: the shipped UNet with PNDM 50 (its default); v2: DDIM 20 (eval_v2.py's headline sampler)
    sampler, steps = ("pndm", 50) if configs.VERSION == 1 else ("ddim", 20)
    res["heldout_unet"] = os.path.relpath(shipped_data.MODEL, configs.ROOT)
    res.update(heldout_measures(pipe, taesd, sampler, steps, seeds))
    os.makedirs(EVAL, exist_ok=True)
    from evaluate import save_grid
    save_grid(os.path.join(EVAL, f"{TAG}_recon.png"), grid, 8)
    save_grid(os.path.join(EVAL, f"{TAG}_shapes.png"), shape_grid, 10)
    for k, v in res.items():
        print(f"{k}: {v}", flush=True)
    with open(os.path.join(EVAL, f"{TAG}_results.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=18.0)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--noisy", type=float, default=0.25, help="fraction of decoder inputs with extra noise")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--target", choices=list(PATHS), default="vae")
    ap.add_argument("--init", help="start from the weights of this work/ checkpoint (e.g. taesd_ckpt.pt)")
    ap.add_argument("--shape-weight", type=float, default=0.0,
                    help="extra decoder-loss weight on shape pixels (train_vae.shape_weights; 0 = off)")
    ap.add_argument("--edge-weight", type=float, default=0.0, help="extra weight within 2 px of the shape outline")
    ap.add_argument("--mix-small", type=int, default=0, help="fresh small-shape renders per batch")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    global CKPT, LOG, OUT, TAG
    ck, lg, OUT, TAG = PATHS[args.target]
    CKPT, LOG = os.path.join(configs.WORK, ck), os.path.join(configs.WORK, lg)
    torch.set_num_threads(2)
    pipe = sampling.Pipeline(shipped_data.MODEL)
    for p in pipe.vae.parameters():
        p.requires_grad_(False)
    if not args.eval_only:
        lat = shipped_data.ensure_latents(pipe)
        images, _ = shipped_data.ensure_images()
        export(train(args, pipe, lat, images))
    evaluate(pipe, load_exported())


if __name__ == "__main__":
    main()
