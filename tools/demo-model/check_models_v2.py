"""Checks our modules (models.py) against diffusers on the version-2 configs (configs.py --version 2:
three-level factor-4 AutoencoderKL, UNet [32, 64, 128] with DownBlock2D first) with random weights.
Exit code 1 on failure (max abs err <= 1e-4 * max(1, max|ref|)).

  /usr/bin/python3 tools/demo-model/check_models_v2.py --version 2
"""
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
from diffusers import AutoencoderKL, UNet2DConditionModel  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import models  # noqa: E402


def randomise(module, g):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def compare(name, a, b):
    err, scale = float((a - b).abs().max()), float(b.abs().max())
    good = err <= 1e-4 * max(1.0, scale)
    print(f"{name}: max abs err {err:.2e} (ref max {scale:.2f}) {'PASS' if good else 'FAIL'}")
    return good


def main():
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    ok = True
    ucfg = configs.unet_config()
    ours = models.UNet2DConditionModel(ucfg).eval()
    randomise(ours, g)
    ref = UNet2DConditionModel(**{k: v for k, v in ucfg.items() if not k.startswith("_")}).eval()
    ref.load_state_dict(ours.state_dict())
    s = ucfg["sample_size"]
    x = torch.randn(2, 4, s, s, generator=g)
    ctx = torch.randn(2, 77, configs.TEXT_HIDDEN, generator=g)
    t = torch.tensor([981, 21])
    with torch.no_grad():
        ok &= compare(f"unet {ucfg['block_out_channels']} {ucfg['down_block_types']} eps", ours(x, t, ctx),
                      ref(x, t, ctx).sample)
    vcfg = configs.vae_config()
    ours = models.AutoencoderKL(vcfg).eval()
    randomise(ours, g)
    ref = AutoencoderKL(**{k: v for k, v in vcfg.items() if not k.startswith("_")}).eval()
    ref.load_state_dict(ours.state_dict())
    img = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    with torch.no_grad():
        mean, logvar = ours.encode(img)
        dist = ref.encode(img).latent_dist
        ok &= compare(f"vae {vcfg['block_out_channels']} mean {tuple(mean.shape)}", mean, dist.mean)
        ok &= compare("vae logvar", logvar, dist.logvar)
        ok &= compare("vae decoded", ours.decode(mean), ref.decode(dist.mean).sample)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
