"""Does a VAE keep shapes? shape_class.py on ground-truth renders and on their VAE reconstructions
(encode -> posterior mean -> decode; no UNet involved), plus the colour check of vae_check.py.

Sets (all fresh, never trained on):
  balanced_seed99  100 single shapes, 20 per class (10 small, 10 large), random colours, backgrounds
                   and positions, numpy rng seed 99  <- the acceptance set (>= 90/100, each class >= 16/20)
  balanced_seed3   the same generator with seed 3 = eval_fast.py's rule check (the README's 50/100)
  colours          64 dataset.sample images (rng seed 99, as vae_check.py): measured shape and background
                   colour of the reconstruction identical to the original's; mean abs error, PSNR

  /usr/bin/python3 tools/demo-model/vae_shape_check.py --version 2 [--ckpt work/v2/vae_ckpt.pt]
  /usr/bin/python3 tools/demo-model/vae_shape_check.py --model resources/demo-model   # the shipped VAE
Writes eval/v<N>/vae_shape_check[_<tag>].json and a grid (rows: originals, reconstructions).
"""
import argparse
import json
import os
import sys

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import shape_class  # noqa: E402
import st_io  # noqa: E402
from evaluate import save_grid  # noqa: E402


def balanced_renders(n, seed):
    """n single-shape renders: shape = SHAPES[i % 5], size small/large alternating per 5 (eval_fast.rule_check)."""
    rng = np.random.default_rng(seed)
    imgs, shapes = [], []
    for i in range(n):
        shape, size = shape_class.SHAPES[i % 5], ["small", "large"][(i // 5) % 2]
        bg = dataset.BACKGROUNDS[rng.integers(9)]
        col = [c for c in dataset.SHAPE_COLOURS if c != bg][rng.integers(5)]
        img = dataset.background(rng, bg)
        px, py = list(dataset.POSITIONS.values())[rng.integers(9)]
        m = dataset.shape_mask(shape, px + rng.uniform(-3, 3), py + rng.uniform(-3, 3),
                               rng.uniform(*dataset.SIZES[size]), rng.uniform(-0.3, 0.3))
        dataset.paint(img, m, col)
        imgs.append(np.clip(np.rint(img), 0, 255).astype(np.uint8))
        shapes.append(shape)
    return np.stack(imgs), shapes


def load_vae(args):
    if args.model:
        with open(os.path.join(args.model, "vae", "config.json")) as f:
            vae = models.AutoencoderKL(json.load(f))
        sd, _ = st_io.load(os.path.join(args.model, "vae", "diffusion_pytorch_model.safetensors"))
        vae.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()})
    else:
        vae = models.AutoencoderKL(configs.vae_config())
        vae.load_state_dict(torch.load(args.ckpt)["model"])
    return vae.eval()


@torch.no_grad()
def reconstruct(vae, imgs):
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    mean, _ = vae.encode(x)
    rec = (vae.decode(mean) / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    return np.rint(rec * 255).astype(np.uint8)


def shape_score(imgs, shapes):
    got = [shape_class.classify(im)["shape"] for im in imgs]
    per = {k: sum(g == s for g, s in zip(got, shapes) if s == k) for k in shape_class.SHAPES}
    return {"correct": sum(per.values()), "images": len(imgs), "per_class": per,
            "min_class": min(per.values()), "per_class_of": len(imgs) // len(shape_class.SHAPES)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=os.path.join(configs.WORK, "vae_ckpt.pt"))
    ap.add_argument("--model", default=None, help="an exported diffusers folder instead of a checkpoint")
    ap.add_argument("--tag", default="")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(2)
    vae = load_vae(args)
    out = {"vae": os.path.relpath(args.model or args.ckpt, configs.ROOT),
           "block_out_channels": vae.config["block_out_channels"]}
    grids = []
    for name, seed in (("balanced_seed99", 99), ("balanced_seed3", 3)):
        imgs, shapes = balanced_renders(100, seed)
        rec = reconstruct(vae, imgs)
        out[name] = {"ground_truth": shape_score(imgs, shapes), "reconstructed": shape_score(rec, shapes)}
        r = out[name]["reconstructed"]
        print(f"{name}: ground truth {out[name]['ground_truth']['correct']}/100, "
              f"reconstructed {r['correct']}/100 {r['per_class']}", flush=True)
        if seed == 99:
            grids += [imgs[:20], rec[:20]]

    rng = np.random.default_rng(99)
    imgs = np.stack([dataset.sample(rng, set())[0] for _ in range(64)])
    rec = reconstruct(vae, imgs)
    err = np.abs(rec.astype(np.float64) - imgs) / 255.0
    same = sum(ma["shape_colour"] == mb["shape_colour"] and ma["background"] == mb["background"]
               for ma, mb in ((measure.measure(a), measure.measure(b)) for a, b in zip(imgs, rec)))
    out["colours"] = {"images": 64, "colours_identical": int(same), "mean_abs_err_255": float(err.mean() * 255),
                      "psnr_db": float(10 * np.log10(1.0 / (err ** 2).mean()))}
    print(f"colours: identical on {same}/64, mean abs err {err.mean() * 255:.2f}/255, "
          f"PSNR {out['colours']['psnr_db']:.2f} dB", flush=True)
    ok = out["balanced_seed99"]["reconstructed"]
    out["acceptance"] = bool(ok["correct"] >= 90 and ok["min_class"] >= 16)
    print(f"acceptance (>= 90/100, every class >= 16/20): {'PASS' if out['acceptance'] else 'FAIL'}")
    os.makedirs(configs.EVAL, exist_ok=True)
    suffix = f"_{args.tag}" if args.tag else ""
    save_grid(os.path.join(configs.EVAL, f"vae_shape_check{suffix}.png"), np.concatenate(grids), 20)
    with open(os.path.join(configs.EVAL, f"vae_shape_check{suffix}.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
