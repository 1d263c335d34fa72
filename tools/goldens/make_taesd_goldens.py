#!/usr/bin/python3
"""Makes tests/data/tiny-taesd: a tiny random diffusers AutoencoderTiny (TAESD) and its goldens.

    /usr/bin/python3 tools/goldens/make_taesd_goldens.py tests/data/tiny-taesd \
        [--diffusers /work/diffusers-v0.31.0] [--shared-tools /work/shared/tools]

Writes (all from fixed seeds, float32, CPU, one thread; rerunning gives the same bytes):
  <out>/config.json, <out>/diffusion_pytorch_model.safetensors   AutoencoderTiny.save_pretrained
  <out>/single-file/taesd_decoder.safetensors, taesd_encoder.safetensors
        the same weights in madebyollin's layout (keys of taesd.py's nn.Sequential: the encoder's
        `encoder.layers.K.*` is `K.*`; the decoder's `decoder.layers.K.*` is `K+1.*` because
        taesd.py's Decoder starts with a parameter-free Clamp() module; the mapping diffusers'
        scripts/convert_tiny_autoencoder_to_diffusers.py undoes)
  <out>/goldens/taesd.safetensors   reference tensors (see the README this script writes)
"""
import argparse
import json
import os
import sys


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("out", help="output folder, e.g. tests/data/tiny-taesd")
    p.add_argument("--tiny-sd", default="tests/data/tiny-sd",
                   help="the tiny SD model whose UNet, scheduler and prompt embeddings the pipeline golden uses")
    p.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
    p.add_argument("--shared-tools", default="/work/shared/tools")
    return p.parse_args()


ARGS = parse_args()
sys.path.insert(0, ARGS.shared_tools)
import diffusers_env  # noqa: E402

diffusers_env.setup(ARGS.diffusers)
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from diffusers import AutoencoderTiny  # noqa: E402
from diffusers.image_processor import VaeImageProcessor  # noqa: E402
import diffusers  # noqa: E402

torch.set_num_threads(1)
SEED = 1234
CHANNELS = 16  # a multiple of 16: the engine's Winograd convolutions run, as on the real 64-channel TAESD


def make_model():
    torch.manual_seed(SEED)
    vae = AutoencoderTiny(
        encoder_block_out_channels=(CHANNELS,) * 4,
        decoder_block_out_channels=(CHANNELS,) * 4,
        latent_channels=4,
        num_encoder_blocks=(1, 3, 3, 3),
        num_decoder_blocks=(3, 3, 3, 1),
    )
    # torch's default init (uniform, bound 1/sqrt(fan_in)) shrinks activations ~3x per conv, so
    # after ~40 convolutions the output would be the last bias alone and a wrong early layer
    # would go unnoticed. Re-draw: He-normal weights, the third conv of each residual branch
    # scaled down (the skip adds the input back), and biases that keep the final image mostly
    # inside (0, 1), where the pipeline's clamp does not hide errors.
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith(".weight"):
                fan_in = p[0].numel()
                std = (2.0 / fan_in) ** 0.5
                if ".conv.4." in name:
                    std *= 0.3
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        last = vae.decoder.layers[-1]
        last.weight.mul_(0.1)
        last.bias.fill_(0.5)
    vae.eval()
    return vae


def to_madebyollin(state, half):
    """diffusers state dict -> madebyollin's single-file keys for one half."""
    out = {}
    prefix = half + ".layers."
    for k, v in state.items():
        if not k.startswith(prefix):
            continue
        index, rest = k[len(prefix):].split(".", 1)
        index = int(index) + (1 if half == "decoder" else 0)
        out[f"{index}.{rest}"] = v.contiguous()
    return out


def from_madebyollin(encoder_sd, decoder_sd):
    """The mapping of diffusers' scripts/convert_tiny_autoencoder_to_diffusers.py."""
    out = {f"encoder.layers.{k}": v for k, v in encoder_sd.items()}
    for k, v in decoder_sd.items():
        index, rest = k.split(".", 1)
        out[f"decoder.layers.{int(index) - 1}.{rest}"] = v
    return out


def pipeline_image(vae, latents):
    """What StableDiffusionPipeline(vae=AutoencoderTiny) returns for output_type='np' from final latents."""
    with torch.no_grad():
        sample = vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
    processor = VaeImageProcessor(vae_scale_factor=2 ** (len(vae.config.block_out_channels) - 1))
    image = processor.postprocess(sample, output_type="np", do_denormalize=[True] * sample.shape[0])
    return sample, torch.from_numpy(image)


def main():
    out = ARGS.out
    vae = make_model()
    vae.save_pretrained(out, safe_serialization=True)
    state = load_file(os.path.join(out, "diffusion_pytorch_model.safetensors"))

    single = os.path.join(out, "single-file")
    os.makedirs(single, exist_ok=True)
    dec_sd, enc_sd = to_madebyollin(state, "decoder"), to_madebyollin(state, "encoder")
    save_file(dec_sd, os.path.join(single, "taesd_decoder.safetensors"))
    save_file(enc_sd, os.path.join(single, "taesd_encoder.safetensors"))
    # The single files must describe the same model: convert back the way diffusers' script does.
    reloaded = AutoencoderTiny.from_pretrained(out)
    missing = reloaded.load_state_dict(from_madebyollin(
        load_file(os.path.join(single, "taesd_encoder.safetensors")),
        load_file(os.path.join(single, "taesd_decoder.safetensors"))), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    reloaded.eval()

    g = torch.Generator().manual_seed(SEED + 2)
    goldens = {}
    stats = []
    # Decode: latents as the UNet leaves them (std ~1, some beyond the decoder's tanh clamp at 3).
    for tag, shape in (("a", (1, 4, 8, 8)), ("b", (2, 4, 5, 7))):
        latents = torch.randn(shape, generator=g) * 1.5
        sample, image = pipeline_image(vae, latents)
        sample2, image2 = pipeline_image(reloaded, latents)
        assert torch.equal(sample, sample2) and torch.equal(image, image2)
        goldens[f"decode_latents_{tag}"] = latents
        goldens[f"decode_sample_{tag}"] = sample
        goldens[f"decode_image_{tag}"] = image
        inside = ((image > 0) & (image < 1)).float().mean().item()
        stats.append(f"decode {tag}: latents {list(shape)}, |sample| max {sample.abs().max():.3f}, "
                     f"image inside (0,1): {100 * inside:.1f} %")
    # Encode: images in [-1, 1] as the img2img pipeline's image_processor.preprocess makes them.
    for tag, shape in (("a", (1, 3, 64, 64)), ("b", (2, 3, 36, 50))):
        image = torch.rand(shape, generator=g) * 2 - 1
        with torch.no_grad():
            latents = vae.encode(image).latents
            latents2 = reloaded.encode(image).latents
        assert torch.equal(latents, latents2)
        goldens[f"encode_image_{tag}"] = image
        goldens[f"encode_latents_{tag}"] = latents
        stats.append(f"encode {tag}: image {list(shape)} -> latents {list(latents.shape)}, "
                     f"|latents| max {latents.abs().max():.3f}")

    pipeline_goldens, pipeline_stats = pipeline_with_taesd(vae)
    stats += pipeline_stats

    os.makedirs(os.path.join(out, "goldens"), exist_ok=True)
    meta = {"diffusers": diffusers.__version__, "torch": torch.__version__, "seed": str(SEED),
            "made_by": "tools/goldens/make_taesd_goldens.py"}
    save_file({k: v.contiguous() for k, v in goldens.items()}, os.path.join(out, "goldens", "taesd.safetensors"),
              metadata=meta)
    save_file({k: v.contiguous() for k, v in pipeline_goldens.items()},
              os.path.join(out, "goldens", "pipeline_tiny_sd.safetensors"), metadata=meta)
    write_readme(out, vae, stats)
    print("\n".join(stats))


def pipeline_with_taesd(vae):
    """StableDiffusionPipeline with tiny-sd's UNet and scheduler and this TAESD as its vae."""
    from diffusers import PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    sd = ARGS.tiny_sd
    unet = UNet2DConditionModel.from_pretrained(os.path.join(sd, "unet"))
    scheduler = PNDMScheduler.from_pretrained(os.path.join(sd, "scheduler"))
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    g = load_file(os.path.join(sd, "goldens", "pipeline.safetensors"))
    latents = g["latents_init"][:, :, :16, :16].contiguous()  # 128×128 images through TAESD's 8×
    args = dict(prompt_embeds=g["prompt_embeds"], negative_prompt_embeds=g["negative_prompt_embeds"],
                latents=latents, height=128, width=128, num_inference_steps=5, guidance_scale=7.5)
    with torch.no_grad():
        final = pipe(output_type="latent", **args).images
        images = torch.from_numpy(pipe(output_type="np", **args).images)
    _, direct = pipeline_image(vae, final)
    assert torch.equal(direct, images), "the pipeline's decode is not vae.decode(latents / 1.0) + postprocess"
    return ({"latents_init": latents, "latents_final": final, "images": images},
            [f"pipeline: latents_final {list(final.shape)}, images {list(images.shape)}"])


def write_readme(out, vae, stats):
    cfg = {k: v for k, v in vae.config.items() if not k.startswith("_")}
    text = f"""# tiny-taesd - tiny random AutoencoderTiny (TAESD) (test data)

Made by `tools/goldens/make_taesd_goldens.py` (rerun it to regenerate; same bytes) with diffusers
{diffusers.__version__} and torch {torch.__version__}, float32, CPU, one thread, seed {SEED}. Random weights:
it decodes noise, not pictures.

- `config.json`, `diffusion_pytorch_model.safetensors`: `AutoencoderTiny.save_pretrained` (diffusers layout)
  with {CHANNELS} channels everywhere, num_encoder_blocks (1, 3, 3, 3), num_decoder_blocks (3, 3, 3, 1)
  (TAESD's structure; the real one has 64 channels). Weights re-drawn after construction (He-normal,
  see the script) so activations stay of order one through the ~40 convolutions.
- `single-file/taesd_decoder.safetensors`, `single-file/taesd_encoder.safetensors`: the same weights in
  madebyollin's layout (the keys of taesd.py's `nn.Sequential`s: decoder key `K+1.*` is diffusers'
  `decoder.layers.K.*`, encoder key `K.*` is `encoder.layers.K.*`). The script checks that converting
  them back as diffusers' `scripts/convert_tiny_autoencoder_to_diffusers.py` does gives identical outputs.
- `goldens/taesd.safetensors` (NCHW unless said otherwise):
  - `decode_latents_{{a,b}}`: latents (a: 1×4×8×8, b: 2×4×5×7, ~N(0, 1.5²));
    `decode_sample_{{a,b}}`: `AutoencoderTiny.decode(latents / scaling_factor).sample` (≈ [-1, 1], unclamped);
    `decode_image_{{a,b}}` (**NHWC**): what `StableDiffusionPipeline` returns for `output_type="np"` from those
    final latents: `VaeImageProcessor.postprocess(sample, "np")` = `(sample / 2 + 0.5).clamp(0, 1)`, NHWC.
  - `encode_image_{{a,b}}`: images in [-1, 1] (a: 1×3×64×64, b: 2×3×36×50 — odd sizes: each stride-2
    convolution rounds up); `encode_latents_{{a,b}}`: `AutoencoderTiny.encode(image).latents` (what
    img2img then multiplies by scaling_factor = 1.0).
- `goldens/pipeline_tiny_sd.safetensors`: `StableDiffusionPipeline(vae=<this TAESD>, unet=tiny-sd/unet,
  scheduler=tiny-sd/scheduler (PNDM))` called with tiny-sd's `goldens/pipeline.safetensors` `prompt_embeds`
  and `negative_prompt_embeds`, `latents=latents_init[:, :, :16, :16]` (stored as `latents_init`),
  height = width = 128, 5 steps, guidance 7.5: `latents_final` (output_type="latent", 2×4×16×16) and
  `images` (output_type="np", NHWC 2×128×128×3). The script checks that `images` is exactly
  `decode_image` of `latents_final`: the pipeline decodes TAESD's latents undivided (scaling_factor 1.0).

config: `{json.dumps(cfg)}`

Statistics at generation:
""" + "".join(f"- {s}\n" for s in stats)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
