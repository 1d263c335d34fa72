"""Reconstruction check of the trained VAE on fresh images (seed 99, never trained on): L1, PSNR,
and whether the measurement rule finds the same colours/position on the reconstruction.
Writes eval/vae_recon.png (rows: originals, reconstructions)."""
import os
import sys

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import dataset  # noqa: E402
import evaluate  # noqa: E402
import measure  # noqa: E402
import train_unet  # noqa: E402
import train_vae  # noqa: E402


def main():
    torch.set_num_threads(2)
    rng = np.random.default_rng(99)
    imgs = np.stack([dataset.sample(rng, set())[0] for _ in range(64)])
    vae = train_unet.load_vae()
    dec = os.path.join(configs.WORK, "vae_dec_ckpt.pt")
    if len(sys.argv) > 1 and sys.argv[1] == "--decoder-finetune":
        vae.load_state_dict(torch.load(dec)["model"])
        vae.eval()
    with torch.no_grad():
        mean, _ = vae.encode(train_vae.to_tensor(imgs))
        rec = vae.decode(mean)
    rec = np.rint(((rec / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()) * 255).astype(np.uint8)
    err = np.abs(rec.astype(np.float64) - imgs) / 255.0
    psnr = 10 * np.log10(1.0 / (err ** 2).mean())
    same = 0
    for a, b in zip(imgs, rec):
        ma, mb = measure.measure(a), measure.measure(b)
        same += ma["shape_colour"] == mb["shape_colour"] and ma["background"] == mb["background"]
    os.makedirs(evaluate.EVAL, exist_ok=True)
    evaluate.save_grid(os.path.join(evaluate.EVAL, "vae_recon.png"), np.concatenate([imgs[:16], rec[:16]]), 16)
    print(f"VAE on 64 fresh images: mean abs err {err.mean() * 255:.2f}/255, PSNR {psnr:.2f} dB, "
          f"measured colours identical on {same}/64")


if __name__ == "__main__":
    main()
