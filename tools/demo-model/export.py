"""Writes the diffusers folder resources/demo-model/ from the training checkpoints:
VAE (work/vae_ckpt.pt), EMA text encoder + UNet (work/unet_ckpt.pt), tokenizer (work/tokenizer).
Text encoder and VAE are stored as F32, the UNet as F16 (to stay under 20 MB in total).

  /usr/bin/python3 tools/demo-model/export.py [--out DIR] [--no-ema]
  /usr/bin/python3 tools/demo-model/export.py --version 2       # -> work/v2/export (staging, not resources/)
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import models  # noqa: E402
import st_io  # noqa: E402
import train_unet  # noqa: E402
import train_vae  # noqa: E402

OUT = os.path.join(configs.ROOT, "resources", "demo-model") if configs.VERSION == 1 else os.path.join(configs.WORK, "export")


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_weights(path, module, state, dtype):
    # Validate the state against our module (names + shapes) before writing.
    module.load_state_dict(state)
    st_io.save(path, {k: v.detach().numpy().astype(dtype) for k, v in state.items()}, {"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--no-ema", action="store_true")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    export(args.out, args.no_ema)


def export(out, no_ema=False):
    # Decoder fine-tune (finetune_decoder.py) if it ran: same encoder, better decoder.
    dec = os.path.join(configs.WORK, "vae_dec_ckpt.pt")
    vck = torch.load(dec if os.path.exists(dec) else train_vae.CKPT)
    uck = torch.load(train_unet.CKPT)
    lat = torch.load(train_unet.LATENTS)
    te_state = uck["te"] if no_ema else uck["ema"]["te"]
    unet_state = uck["unet"] if no_ema else uck["ema"]["unet"]

    with open(os.path.join(configs.TINY, "model_index.json")) as f:
        index = json.load(f)
    index["scheduler"] = ["diffusers", configs.scheduler_config()["_class_name"]]
    write_json(os.path.join(out, "model_index.json"), index)
    write_json(os.path.join(out, "scheduler", "scheduler_config.json"), configs.scheduler_config())

    te_cfg = configs.text_encoder_config(lat["vocab_size"])
    write_json(os.path.join(out, "text_encoder", "config.json"), te_cfg)
    write_weights(os.path.join(out, "text_encoder", "model.safetensors"), models.CLIPTextModel(te_cfg), te_state,
                  np.float32)

    unet_cfg = configs.unet_config()
    write_json(os.path.join(out, "unet", "config.json"), unet_cfg)
    write_weights(os.path.join(out, "unet", "diffusion_pytorch_model.safetensors"),
                  models.UNet2DConditionModel(unet_cfg), unet_state, np.float16)

    vae_cfg = configs.vae_config()
    vae_cfg["scaling_factor"] = round(1.0 / lat["std"], 5)
    write_json(os.path.join(out, "vae", "config.json"), vae_cfg)
    write_weights(os.path.join(out, "vae", "diffusion_pytorch_model.safetensors"), models.AutoencoderKL(vae_cfg),
                  vck["model"], np.float32)

    os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
    for name in ("vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(configs.TOKENIZER_DIR, name), os.path.join(out, "tokenizer", name))

    total = 0
    for root, _, files in os.walk(out):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    print(f"exported to {out}: {total / 1e6:.2f} MB, unet step {uck['step']}, "
          f"{'raw' if no_ema else 'EMA'} weights, scaling_factor {vae_cfg['scaling_factor']}")


if __name__ == "__main__":
    main()
