"""Model configurations of the demo model. The dicts use exactly the key sets diffusers 0.31 /
transformers write (copied from tests/data/tiny-sd) so the engine's loader sees familiar files.

Two recipes, chosen by `--version N` on any script's command line (or DEMO_MODEL_VERSION=N):
  1 (default) the shipped model: VAE factor 8 (8x8x4 latents), work files in work/;
  2 the shape-keeping model: VAE factor 4 (16x16x4 latents), caption synonyms (big/large,
    small/little/tiny, centre/center/middle), UNet [32, 64, 128] at 16x16; work files in work/v2/.
"""
import json
import os
import sys


def _version_from_argv():
    for i, a in enumerate(sys.argv):
        if a == "--version" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if a.startswith("--version="):
            return int(a.split("=", 1)[1])
    return int(os.environ.get("DEMO_MODEL_VERSION", "1"))


VERSION = _version_from_argv()
assert VERSION in (1, 2), f"unknown demo-model version {VERSION}"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "tiny-sd")
WORK = os.path.join(HERE, "work") if VERSION == 1 else os.path.join(HERE, "work", f"v{VERSION}")
TOKENIZER_DIR = os.path.join(WORK, "tokenizer")
EVAL = os.path.join(HERE, "eval") if VERSION == 1 else os.path.join(HERE, "eval", f"v{VERSION}")
SYNONYMS = VERSION >= 2                # caption grammar with big/little/tiny/center/middle

IMAGE_SIZE = 64
if VERSION == 1:
    VAE_BLOCKS = [16, 32, 64, 64]      # vae_scale_factor 8: 64x64 image <-> 8x8x4 latents
    UNET_BLOCKS = [64, 128, 128]
else:
    VAE_BLOCKS = [16, 32, 64]          # vae_scale_factor 4: 64x64 image <-> 16x16x4 latents
    # at 16x16 / 8x8 / 4x4 / 2x2; cross-attention at 8x8 and 4x4 (below). The 3-level [32, 64, 128]
    # (deepest 4x4) learned colours and shapes but no positions in 7476 steps (README, v2).
    UNET_BLOCKS = [32, 64, 128, 128]
LATENT_SIZE = IMAGE_SIZE // 2 ** (len(VAE_BLOCKS) - 1)
TEXT_HIDDEN = 64


def add_version_arg(ap):
    """Every script accepts --version (read by this module at import time)."""
    ap.add_argument("--version", type=int, default=VERSION, choices=[1, 2],
                    help="demo-model recipe: 1 = shipped (VAE factor 8), 2 = shape-keeping (VAE factor 4)")


def _tiny(sub):
    with open(os.path.join(TINY, sub, "config.json")) as f:
        return json.load(f)


def vae_config():
    c = _tiny("vae")
    c.update(block_out_channels=VAE_BLOCKS, layers_per_block=1, latent_channels=4,
             down_block_types=["DownEncoderBlock2D"] * len(VAE_BLOCKS),
             up_block_types=["UpDecoderBlock2D"] * len(VAE_BLOCKS), sample_size=IMAGE_SIZE,
             norm_num_groups=4, scaling_factor=1.0)  # scaling_factor set from measured latents
    return c


def unet_config():
    c = _tiny("unet")
    if VERSION == 1:
        down = ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"]
        up = ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"]
    else:  # SDXL's pattern: self-attention over 16x16 = 256 tokens cost 4x the step time (measured)
        down = ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"]
        up = ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"]
    c.update(sample_size=LATENT_SIZE, block_out_channels=UNET_BLOCKS, layers_per_block=1,
             down_block_types=down, up_block_types=up,
             cross_attention_dim=TEXT_HIDDEN, attention_head_dim=4, norm_num_groups=8)
    return c


def text_encoder_config(vocab_size):
    c = _tiny("text_encoder")
    c.update(hidden_size=TEXT_HIDDEN, intermediate_size=4 * TEXT_HIDDEN, num_hidden_layers=3,
             num_attention_heads=4, projection_dim=TEXT_HIDDEN, vocab_size=vocab_size,
             max_position_embeddings=77)
    c.pop("transformers_version", None)
    return c


def scheduler_config():
    """SD 1.x's PNDM config; version 2 with DDPM's linear betas (0.0001-0.02) instead of scaled_linear.

    Why: version 2's latents are 16x16 (4x the pixels of version 1's 8x8), and under SD's
    scaled_linear betas a shape's position stays readable in x_t until the very last timesteps
    (SNR at t=999 4.7e-3, at t=874 1.9e-2, summed over the ~16 latent pixels a shape covers).
    The 3-level run learned colours and shapes but never the position words: the seed's noise
    alone placed the shape. Linear betas leave 100x less signal at t=999 (SNR 4.0e-5; t=874
    4.3e-4), so the text is what decides the layout at the start of sampling.
    And v-prediction (as SD 2.x): an epsilon loss weighs an error in the predicted image by the
    SNR, ~0 at the high-noise steps where the layout is decided (1600 steps on linear betas
    still ignored the position words: x0 predicted at t=999 centred for every word); the v
    loss weighs it by SNR + 1."""
    with open(os.path.join(TINY, "scheduler", "scheduler_config.json")) as f:
        c = json.load(f)
    if VERSION == 2:  # and DDIM as the folder's own scheduler: PNDM 50 drifts backgrounds (0.875 held-out)
        c = {"_class_name": "DDIMScheduler", "_diffusers_version": "0.31.0", "beta_end": 0.02,
             "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": False, "num_train_timesteps": 1000,
             "prediction_type": "v_prediction", "rescale_betas_zero_snr": False, "set_alpha_to_one": False,
             "steps_offset": 1, "thresholding": False, "timestep_spacing": "leading", "trained_betas": None}
    return c
