"""Cross-checks the few-step add-ons with the C++ engine (an `octodiff-cli` built from main with
the LCM/TAESD wiring; not built by this tool), same initial latents, --compat diffusers:
  (1) the demo model, DDIM 20, g 7.5, decoded by the demo TAESD (--taesd): engine image vs our torch
      pipeline's latents decoded by diffusers' AutoencoderTiny;
  (2) the LCM demo model (resources/demo-model-lcm), 1 LCM step (no step noise), g 7.5: engine
      image vs our torch LCM pipeline (VAE decode).
Optionally (--heldout) the held-out agreement of engine images, default flax semantics, seeds 0..3.

  /usr/bin/python3 tools/demo-model/check_engine_fast.py --cli build/engine/cli/octodiff-cli
  /usr/bin/python3 tools/demo-model/check_engine_fast.py --version 2 --cli ... [--lcm DIR]
      # version 2: the staging folder work/v2/export with its taesd/ (train_taesd.py --version 2) and
      # work/v2/export-lcm (train_lcm.py --version 2); results eval/v2/engine_check_fast.json
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
import safetensors.torch  # noqa: E402,F401  (diffusers loads with safetensors.torch)
from diffusers import AutoencoderTiny  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_engine  # noqa: E402
import configs  # noqa: E402
import evaluate  # noqa: E402
import measure  # noqa: E402
import sampling  # noqa: E402
import shape_class  # noqa: E402
import shipped_data  # noqa: E402
import st_io  # noqa: E402
import train_lcm  # noqa: E402

MODEL = shipped_data.MODEL  # v1 resources/demo-model, v2 work/v2/export
TAESD = os.path.join(MODEL, "taesd")


def zero_unet_copy(tmp):
    """MODEL copied with the UNet's conv_out zeroed: eps = 0 exactly in torch and in the engine, so the
    DDIM loop only rescales the initial latents and the image difference is the decoder's own."""
    out = os.path.join(tmp, "zero-unet")
    shutil.copytree(MODEL, out, ignore=shutil.ignore_patterns("taesd"))
    path = os.path.join(out, "unet", "diffusion_pytorch_model.safetensors")
    sd, _ = st_io.load(path)
    for k in ("conv_out.weight", "conv_out.bias"):
        sd[k] = np.zeros_like(sd[k])
    st_io.save(path, sd, {"format": "pt"})
    return out


def decoder_rows(cli, entries, taesd, lat, tmp):
    """Engine vs torch on the zero-UNet copy, DDIM 20: the TAESD and VAE decodes of identical latents."""
    model, p, res = zero_unet_copy(tmp), entries[4]["prompt"], {}
    pipe = sampling.Pipeline(model)
    with torch.no_grad():  # eps = 0: the final latents are c * initial; scale them to std 1
        lat = lat / float(pipe.generate([p], None, steps=20, sampler="ddim", latents=lat, output="latents").std())
        z = pipe.generate([p], None, guidance=7.5, steps=20, sampler="ddim", latents=lat, output="latents")
    np.save(os.path.join(tmp, "lat_zero.npy"), lat.numpy()[None].astype(np.float32))
    for dec in ("taesd", "vae"):
        eng = check_engine.run(cli, model, p, ["--compat", "diffusers", "--scheduler", "ddim", "--steps", "20",
                                               "--latents", os.path.join(tmp, "lat_zero.npy"), "--taesd", TAESD,
                                               "--decoder", dec], tmp)
        with torch.no_grad():
            ours = (sampling.to_images(taesd.decode(z).sample, True) if dec == "taesd" else pipe.decode(z, True))[0]
        key = f"zero_unet_{dec}_decode_max_abs_image_diff"
        res[key] = float(np.abs(eng - ours).max())
        res[f"zero_unet_{dec}_unclamped_pixel_fraction"] = float(((ours > 0) & (ours < 1)).mean())
        print(f"engine vs torch, UNet conv_out zeroed (decoder alone, final latents std {float(z.std()):.2f}), "
              f"{dec.upper()}: max abs image diff {res[key]:.2e} ({res[f'zero_unet_{dec}_unclamped_pixel_fraction']:.0%}"
              f" of the values inside (0, 1))", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--heldout", action="store_true")
    ap.add_argument("--lcm-guidance", type=float, default=7.5)
    ap.add_argument("--lcm", default=train_lcm.OUT, help="the LCM folder (v1 resources/demo-model-lcm, "
                                                          "v2 work/v2/export-lcm)")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    LCM = args.lcm
    torch.set_num_threads(2)
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        entries = json.load(f)["prompts"]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = sampling.Pipeline(MODEL)
        s = base.unet.config["sample_size"]
        lat = torch.randn(1, 4, s, s, generator=torch.Generator().manual_seed(0))
        np.save(os.path.join(tmp, "lat.npy"), lat.numpy()[None].astype(np.float32))
        p = entries[4]["prompt"]
        taesd = AutoencoderTiny.from_pretrained(TAESD).eval()
        res.update(decoder_rows(args.cli, entries, taesd, lat, tmp))
        # TAESD rows; the VAE rows beside them show how much of the difference the denoising loop makes
        for sched in ("ddim", "pndm"):
            with torch.no_grad():
                z = base.generate([p], None, guidance=7.5, steps=20, sampler=sched, latents=lat, output="latents")
            for dec in ("taesd", "vae"):
                eng = check_engine.run(args.cli, MODEL, p, ["--compat", "diffusers", "--scheduler", sched, "--steps",
                                                            "20", "--latents", os.path.join(tmp, "lat.npy"),
                                                            "--taesd", TAESD, "--decoder", dec], tmp)
                with torch.no_grad():
                    ours = (sampling.to_images(taesd.decode(z).sample, True) if dec == "taesd"
                            else base.decode(z, True))[0]
                key = f"{dec}_{sched}20_max_abs_image_diff"
                res[key] = float(np.abs(eng - ours).max())
                print(f"engine vs torch, demo model {sched.upper()} 20 + {dec.upper()}, '{p}': max abs image diff "
                      f"{res[key]:.2e}", flush=True)
        if os.path.exists(os.path.join(LCM, "unet", "config.json")):
            lcm = sampling.Pipeline(LCM)
            g = args.lcm_guidance
            eng = check_engine.run(args.cli, LCM, p, ["--compat", "diffusers", "--steps", "1", "--guidance", str(g),
                                                      "--latents", os.path.join(tmp, "lat.npy")], tmp)
            ours = lcm.generate([p], [0], guidance=g, steps=1, sampler="lcm", latents=lat, as_float=True)[0]
            res["lcm1_max_abs_image_diff"] = float(np.abs(eng - ours).max())
            print(f"engine vs torch, LCM demo model 1 step g {g}: max abs image diff "
                  f"{res['lcm1_max_abs_image_diff']:.2e}", flush=True)
            if args.heldout:
                for steps, extra in ((4, []), (4, ["--taesd", TAESD])):
                    imgs, ok, shp = [], 0, 0
                    for e in entries:
                        for s in range(4):
                            im = check_engine.run(args.cli, LCM, e["prompt"], ["--seed", str(s), "--steps", str(steps),
                                                                               "--guidance", str(g)] + extra, tmp)
                            u8 = np.rint(im * 255).astype(np.uint8)
                            imgs.append(u8)
                            ok += measure.agrees(e, measure.measure(u8))[0]
                            shp += shape_class.classify(u8)["shape"] == e["shape"]
                    tag = f"engine_lcm{steps}_g{g}" + ("_taesd" if extra else "")
                    res[tag] = {"agreement": ok / len(imgs), "shape_class": shp / len(imgs), "images": len(imgs)}
                    evaluate.save_grid(os.path.join(configs.EVAL, f"{tag}_heldout.png"), np.stack(imgs), 8)
                    print(f"{tag}: held-out agreement {ok / len(imgs):.3f}, shape class {shp / len(imgs):.3f}",
                          flush=True)
    res["model"], res["lcm"] = os.path.relpath(MODEL, configs.ROOT), os.path.relpath(LCM, configs.ROOT)
    with open(os.path.join(configs.EVAL, "engine_check_fast.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
