"""Training data for the few-step add-ons (train_taesd.py, train_lcm.py).

Version 1 (default): made from the SHIPPED demo model (resources/demo-model) rather than from work/
checkpoints, so the add-ons can be retrained from a fresh clone:

  work/data.npz            the shapes-world dataset, 24 000 images, seed 1 (as train_vae.py)
  work/shipped_latents.pt  the shipped VAE's posterior mean/logvar of every image, the captions'
                           token ids (shipped tokenizer) and the empty prompt's ids

Version 2 (--version 2): the staging folder work/v2/export (export.py --version 2: the v2 VAE, text
encoder, tokenizer and the UNet of the checkpoint it was exported from) and the files the v2 training
already wrote: work/v2/data.npz (train_vae.py) and work/v2/latents.pt (train_unet.py: the v2 VAE's
posterior mean/logvar, v2 token ids); scaling_factor = the staging VAE config's (1 / latent std).

  nice -n 5 /usr/bin/python3 tools/demo-model/shipped_data.py
"""
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import sampling  # noqa: E402

DATA = os.path.join(configs.WORK, "data.npz")
if configs.VERSION == 1:
    LATENTS = os.path.join(configs.WORK, "shipped_latents.pt")
    MODEL = os.path.join(configs.ROOT, "resources", "demo-model")
else:
    LATENTS = os.path.join(configs.WORK, "latents.pt")  # written by train_unet.py --version 2
    MODEL = os.path.join(configs.WORK, "export")        # written by export.py --version 2


def to_tensor(u8):
    """uint8 [N,H,W,3] -> float [N,3,H,W] in [-1, 1]."""
    return torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def ensure_images(n=24000, seed=1):
    if not os.path.exists(DATA):
        t = time.time()
        imgs, caps = dataset.make_dataset(n, seed)
        np.savez(DATA, images=imgs, captions=np.array(caps))
        print(f"dataset: {n} images (seed {seed}) in {time.time() - t:.0f}s", flush=True)
    d = np.load(DATA)
    return d["images"], list(d["captions"])


@torch.no_grad()
def ensure_latents(pipe=None):
    if configs.VERSION != 1:
        assert os.path.exists(LATENTS), f"{LATENTS} missing: run train_unet.py --version {configs.VERSION} first"
        lat = torch.load(LATENTS)
        pipe = pipe or sampling.Pipeline(MODEL)
        lat["scaling_factor"] = pipe.vae.config["scaling_factor"]
        return lat
    if os.path.exists(LATENTS):
        return torch.load(LATENTS)
    images, captions = ensure_images()
    pipe = pipe or sampling.Pipeline(MODEL)
    t0 = time.time()
    means, logvars = [], []
    for i in range(0, len(images), 256):
        m, lv = pipe.vae.encode(to_tensor(images[i:i + 256]))
        means.append(m)
        logvars.append(lv)
    out = {"mean": torch.cat(means), "logvar": torch.cat(logvars),
           "ids": torch.tensor([pipe.tok.encode_padded(c) for c in captions]),
           "empty_ids": torch.tensor(pipe.tok.encode_padded("")),
           "scaling_factor": pipe.vae.config["scaling_factor"]}
    torch.save(out, LATENTS)
    print(f"encoded {len(images)} images with the shipped VAE in {time.time() - t0:.0f}s", flush=True)
    return out


if __name__ == "__main__":
    torch.set_num_threads(2)
    ensure_latents()
