"""Model configurations of the demo model. The dicts use exactly the key sets diffusers 0.31 /
transformers write (copied from tests/data/tiny-sd) so the engine's loader sees familiar files."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "tiny-sd")
WORK = os.path.join(HERE, "work")
TOKENIZER_DIR = os.path.join(WORK, "tokenizer")

IMAGE_SIZE = 64
VAE_BLOCKS = [16, 32, 64, 64]          # vae_scale_factor 8: 64x64 image <-> 8x8x4 latents
LATENT_SIZE = IMAGE_SIZE // 2 ** (len(VAE_BLOCKS) - 1)
TEXT_HIDDEN = 64


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
    c.update(sample_size=LATENT_SIZE, block_out_channels=[64, 128, 128], layers_per_block=1,
             down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
             up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
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
    with open(os.path.join(TINY, "scheduler", "scheduler_config.json")) as f:
        return json.load(f)
