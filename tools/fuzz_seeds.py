#!/usr/bin/env python3
"""Writes the fuzz seeds that cannot be taken from tests/data as they are (fuzz/README.md):
PNG metadata texts and a small single-file checkpoint with LDM keys. Standard library only."""
import json
import struct
import sys
from pathlib import Path

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus")


def write_safetensors(path, tensors):
    """tensors: {name: (shape, float list)} as float32."""
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def main():
    meta = OUT / "png_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    a1111 = ("a red circle in the centre\nNegative prompt: blurry\nSteps: 20, Sampler: PNDM, CFG scale: 7.5, "
             "Seed: 42, Size: 512x512, Model hash: 0123456789, Model: demo, Denoising strength: 0.6, "
             "Timestep spacing: leading, VAE: TAESD, RNG: JAX classic, Compat: flax")
    ours = {"generator": "octodiff", "version": "0.1.0", "prompts": ["a red circle"], "negative_prompts": [""],
            "seed": 42, "steps": 20, "guidance_scale": 7.5, "scheduler": "pndm", "width": 64, "height": 64,
            "devices": 2, "batch_per_device": 1, "device": 1, "batch_index": 0, "device_key": [1, 2],
            "compat": "flax", "rng": "classic", "dtype": "f32", "model": {"name": "demo", "hash": "ab"},
            "loras": [{"name": "x", "strength": 0.5, "hash": ""}], "denoising_strength": 0.5}
    (meta / "a1111_and_json.txt").write_text(a1111 + "\n@@\n" + json.dumps(ours))
    (meta / "a1111_only.txt").write_text(a1111)
    # A few LDM keys of each component with tiny shapes: detection and key mapping run, then the
    # loader finds the rest missing.
    tiny = lambda *shape: (list(shape), [0.5] * __import__("math").prod(shape))
    write_safetensors(OUT / "single_file" / "ldm_keys.safetensors", {
        "model.diffusion_model.input_blocks.0.0.weight": tiny(4, 4, 3, 3),
        "model.diffusion_model.input_blocks.0.0.bias": tiny(4),
        "model.diffusion_model.time_embed.0.weight": tiny(16, 4),
        "model.diffusion_model.out.2.weight": tiny(4, 4, 3, 3),
        "first_stage_model.decoder.conv_in.weight": tiny(8, 4, 3, 3),
        "first_stage_model.encoder.conv_in.weight": tiny(8, 3, 3, 3),
        "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight": tiny(10, 8),
        "cond_stage_model.transformer.text_model.final_layer_norm.weight": tiny(8),
    })


if __name__ == "__main__":
    main()
