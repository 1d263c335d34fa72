#!/usr/bin/python3
"""octodiff-bench's networks in PyTorch: the same full-size random model folders, the same
shapes, on the same cores, for a per-core comparison.

    # the few-step report's one-step image (octodiff-bench --arch sd-turbo)
    /usr/bin/python3 tools/compare/torch_sd.py \
        --model $OCTODIFF_CACHE_DIR/models/sd-turbo-random-f32 --taesd $OCTODIFF_CACHE_DIR/models/taesd-random-f32 \
        [--dtype f32|bf16] [--threads 2] [--repeats 3] [--diffusers /work/diffusers-v0.31.0] \
        [--shared-tools /work/shared/tools] > torch.json
    # the guided-step report (octodiff-bench, SD 1.5)
    /usr/bin/python3 tools/compare/torch_sd.py --model $OCTODIFF_CACHE_DIR/models/sd15-random-f32 \
        --guided-step --vae [--dtype f32|bf16] > torch.json

(octodiff-bench writes those folders to its cache the first time.) Prints JSON: torch's version
and threads, the BLAS it loaded, the CPU, and per network the first call and the median of the
later ones: the text encoder on one 77-token row, the UNet's batch-1 call on 64×64 latents
(512×512); with --taesd TAESD's decode of them and the three in a row as a one-step image
(guidance 0: one UNet pass, no negative prompt; the scheduler's arithmetic is negligible and left
out); with --guided-step the UNet on the batch of 2 (negative and prompt) a guided step runs; with
--vae the folder's AutoencoderKL decoding 64×64 latents.

What runs: diffusers v0.31.0's UNet2DConditionModel, AutoencoderTiny and AutoencoderKL (eager
PyTorch, as in StableDiffusionPipeline); the text encoder is tools/goldens/clip_text_reference.py,
the same operations as transformers' eager CLIPTextModel (transformers is not available here), run to the
layer count the folder's config gives, in float32 in both modes (as octodiff and the Flax pipeline
compute it). bf16: the UNet's, TAESD's and the VAE's weights and activations in torch.bfloat16
(model.to(torch.bfloat16)), as a PyTorch user runs bf16 on a CPU.

Debian's python3-torch takes its float32 matrix products from the system BLAS: install
libopenblas0-openmp (or -pthread) first, or they run on the reference BLAS at ~5 GFLOP/s and the
text encoder and the UNet's linear layers take 20-40x longer; convolutions and bf16 products go
through oneDNN either way. The report names the BLAS the process loaded ("blas").
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="a diffusers SD 1.x / 2.x folder (SD-Turbo, SD 1.5, …)")
    p.add_argument("--taesd", help="a diffusers AutoencoderTiny folder: its decode and the one-step image")
    p.add_argument("--guided-step", action="store_true",
                   help="also the UNet on [negative; prompt] (batch 2), a classifier-free guided step")
    p.add_argument("--vae", action="store_true", help="also the folder's AutoencoderKL decode")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--channels-last", action="store_true",
                   help="the UNet, TAESD and latents in torch.channels_last (oneDNN's preferred layout)")
    p.add_argument("--repeats", type=int, default=3, help="calls per network (the first is reported alone)")
    p.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
    p.add_argument("--shared-tools", default="/work/shared/tools")
    return p.parse_args()


ARGS = parse_args()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
sys.path.insert(0, ARGS.shared_tools)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "goldens"))
import diffusers_env  # noqa: E402

diffusers_env.setup(ARGS.diffusers)
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel  # noqa: E402
from clip_text_reference import ClipTextReference  # noqa: E402

torch.set_num_threads(ARGS.threads)
DTYPE = torch.bfloat16 if ARGS.dtype == "bf16" else torch.float32


def cpu_name():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                fields.setdefault(k, v)
            elif fields:
                break
    return {"model_name": fields.get("model name"), "family": fields.get("cpu family"), "model": fields.get("model")}


def loaded_blas():
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() and line.strip().endswith(".so.3")}
    return sorted(os.path.realpath(p) for p in libs)


def timed(fn, repeats):
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    later = seconds[1:] or seconds
    return {"first_call_seconds": seconds[0], "median_seconds": statistics.median(later), "all_seconds": seconds}


def main():
    with open(os.path.join(ARGS.model, "text_encoder", "config.json")) as f:
        te_config = json.load(f)
    te_state = load_file(os.path.join(ARGS.model, "text_encoder", "model.safetensors"))  # float32 always
    text_encoder = ClipTextReference(te_state, te_config)
    unet = UNet2DConditionModel.from_pretrained(os.path.join(ARGS.model, "unet")).to(DTYPE).eval()
    taesd = AutoencoderTiny.from_pretrained(ARGS.taesd).to(DTYPE).eval() if ARGS.taesd else None
    vae = AutoencoderKL.from_pretrained(os.path.join(ARGS.model, "vae")).to(DTYPE).eval() if ARGS.vae else None

    g = torch.Generator().manual_seed(0)
    ids = torch.full((2, 77), 49407, dtype=torch.long)  # [negative = empty prompt; prompt]
    ids[:, 0] = 49406  # BOS
    ids[1, 1:12] = torch.randint(1, 49406, (11,), generator=g)
    latents = torch.randn((1, unet.config.in_channels, 64, 64), generator=g).to(DTYPE)
    if ARGS.channels_last:
        unet = unet.to(memory_format=torch.channels_last)
        taesd = taesd.to(memory_format=torch.channels_last) if taesd else None
        vae = vae.to(memory_format=torch.channels_last) if vae else None
        latents = latents.to(memory_format=torch.channels_last)
    t = torch.tensor([999])

    state = {}

    def encode():  # one prompt (one 77-token row)
        state["context"] = text_encoder(ids[1:])["last_hidden_state"].to(DTYPE)

    def unet_call():
        state["eps"] = unet(latents, t, encoder_hidden_states=state["context"]).sample

    def guided_step():  # the UNet on [negative; prompt] at once, as StableDiffusionPipeline's CFG
        state["eps2"] = unet(torch.cat([latents, latents]), t, encoder_hidden_states=state["pair"]).sample

    def decode():
        state["image"] = taesd.decode(state["eps"]).sample

    def vae_decode():
        state["vae_image"] = vae.decode(latents / vae.config.scaling_factor).sample

    def image():
        encode()
        unet_call()
        decode()

    report = {"blas": loaded_blas(), "torch": torch.__version__, "diffusers": "v0.31.0 source tree",
              "threads": torch.get_num_threads(), "dtype": ARGS.dtype, "channels_last": ARGS.channels_last,
              "cpu": cpu_name(), "python": platform.python_version(), "model": ARGS.model, "taesd": ARGS.taesd,
              "height": 512, "width": 512, "text_encoder_layers": te_config["num_hidden_layers"],
              "seconds": "first_call_seconds: the first call alone; median_seconds: the median of the later ones"}
    runs = [("text_encode", encode), ("unet_b1", unet_call)]
    if ARGS.guided_step:
        with torch.inference_mode():  # the pair's encoding, outside the timing
            state["pair"] = text_encoder(ids)["last_hidden_state"].to(DTYPE)
        runs.append(("unet_guided_step", guided_step))
    if taesd:
        runs += [("taesd_decode", decode), ("one_step_image_taesd", image)]
    if vae:
        runs.append(("vae_decode", vae_decode))
    with torch.inference_mode():
        for name, fn in runs:
            print(f"{name}...", file=sys.stderr)
            report[name] = timed(fn, ARGS.repeats)
    if taesd:
        report["one_step_image_over_unet_b1"] = (report["one_step_image_taesd"]["median_seconds"] /
                                                 report["unet_b1"]["median_seconds"])
    print(json.dumps(report, indent=2))


main()
