"""Proves models.py computes what diffusers 0.31 / transformers compute (and hence what the C++
engine computes): loads tests/data/tiny-sd into our modules and compares against its goldens.

Usage: /usr/bin/python3 tools/demo-model/verify_against_goldens.py   (exit code 1 on failure)
Criterion: max|ours - ref| <= 1e-4 * max(1, max|ref|) for every compared tensor.
"""
import json
import os
import sys

import numpy as np

# Other engineers compile on the same 2 cores: OpenMP threads that spin-wait while descheduled
# make a niced job ~10x slower, so wait passively and keep OpenBLAS single-threaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import st_io  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "tiny-sd")


def load_model(cls, sub, weights):
    with open(os.path.join(TINY, sub, "config.json")) as f:
        cfg = json.load(f)
    m = cls(cfg)
    sd, _ = st_io.load(os.path.join(TINY, sub, weights))
    missing, unexpected = m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{sub}: missing {missing} unexpected {unexpected}")
    return m.eval()


def check(label, ours, ref, results):
    ours = ours.detach().numpy().astype(np.float64)
    ref = ref.astype(np.float64)
    assert ours.shape == ref.shape, (label, ours.shape, ref.shape)
    err = float(np.abs(ours - ref).max())
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    rel = err / max(1.0, float(np.abs(ref).max()))
    ok = err <= tol
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {label:34s} max abs err {err:.3e}  rel {rel:.3e}  (max|ref| {np.abs(ref).max():.3g})")


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    gold = os.path.join(TINY, "goldens")
    results = []
    with torch.no_grad():
        te = load_model(models.CLIPTextModel, "text_encoder", "model.safetensors")
        g, _ = st_io.load(os.path.join(gold, "text_encoder.safetensors"))
        check("text_encoder.last_hidden_state", te(torch.from_numpy(g["input_ids"])), g["last_hidden_state"], results)

        # Our tokenizer on the golden prompts (plain-ASCII ones; the simple path is all we need).
        import clip_tokenizer
        tok = clip_tokenizer.CLIPTokenizer(os.path.join(TINY, "tokenizer"))
        tg, _ = st_io.load(os.path.join(gold, "tokenizer.safetensors"))
        with open(os.path.join(gold, "prompts.json")) as f:
            prompts = json.load(f)["tokenizer_prompts"]
        n_ascii = n_ok = 0
        for i, p in enumerate(prompts):
            if not p.isascii():
                continue
            n_ascii += 1
            n_ok += tok.encode_padded(p) == tg["input_ids"][i].tolist()
        ok = n_ok == n_ascii
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} tokenizer ids (ASCII prompts)      {n_ok}/{n_ascii} rows identical")

        unet = load_model(models.UNet2DConditionModel, "unet", "diffusion_pytorch_model.safetensors")
        g, _ = st_io.load(os.path.join(gold, "unet.safetensors"))
        x = torch.from_numpy(g["sample"])
        ctx = torch.from_numpy(g["encoder_hidden_states"])
        for k, t in enumerate(g["timesteps"].tolist()):
            out = unet(x, torch.tensor(t, dtype=torch.int64), ctx)
            check(f"unet.noise_pred[t={t}]", out, g["noise_pred"][k], results)

        vae = load_model(models.AutoencoderKL, "vae", "diffusion_pytorch_model.safetensors")
        g, _ = st_io.load(os.path.join(gold, "vae.safetensors"))
        check("vae.decoded", vae.decode(torch.from_numpy(g["latents_unscaled"])), g["decoded"], results)
        img = torch.from_numpy(g["image"])
        check("vae.moments", vae.moments(img), g["moments"], results)
        mean, logvar = vae.encode(img)
        check("vae.mean", mean, g["mean"], results)
        check("vae.logvar", logvar, g["logvar"], results)

        # Whole pipeline: our samplers + CFG batching + VAE decode vs StableDiffusionPipeline images.
        import sampling
        pipe = sampling.Pipeline(TINY)
        g, _ = st_io.load(os.path.join(gold, "pipeline.safetensors"))
        with open(os.path.join(gold, "prompts.json")) as f:
            pj = json.load(f)
        lat = torch.from_numpy(g["latents_init"])
        for name in ("ddim", "pndm"):
            imgs = pipe.generate(pj["pipeline_prompts"], None, guidance=7.5, negative=[pj["pipeline_negative_prompt"]] * 2,
                                 steps=5, sampler=name, latents=lat, as_float=True)
            check(f"pipeline.{name}.images (g=7.5, 5 steps)", torch.from_numpy(imgs), g[f"{name}.images"], results)

    print(f"{sum(results)}/{len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
