#!/usr/bin/python3
"""Writes a diffusers safetensors folder (tests/data/tiny-sd) as Flax msgpack folders.

    /usr/bin/python3 tools/goldens/make_tiny_sd_flax.py tests/data/tiny-sd tests/data/tiny-sd-flax

Writes <out>/f32 (as `revision="flax"`) and <out>/bf16 (as `revision="bf16"`): in each,
  unet/diffusion_flax_model.msgpack, vae/diffusion_flax_model.msgpack, text_encoder/flax_model.msgpack
plus the json, tokenizer and scheduler files copied from the source folder (model_index.json and
the component configs name the Flax classes, as FlaxStableDiffusionPipeline.save_pretrained does).

Names and layouts follow the torch -> Flax rules, without JAX (Debian has none):
- diffusers components (unet, vae): diffusers v0.31.0
  models/modeling_flax_pytorch_utils.py `rename_key` (`name.N` -> `name_N`) and
  `rename_key_and_reshape_tensor`: a norm's weight -> `scale`; a 4-D weight -> `kernel`
  transposed (2, 3, 1, 0) (OIHW -> HWIO); a 2-D weight -> `kernel` transposed; the VAE's
  attention (FlaxAttentionBlock) `to_q/to_k/to_v/to_out_0` -> `query/key/value/proj_attn`.
  Where diffusers asks the Flax model's own parameter tree whether a `scale` exists, this script
  uses the equivalent fact that norm weights are the only 1-D weights of these models.
- the text encoder: transformers' torch -> Flax rules for FlaxCLIPTextModel (names split on `.`,
  digits stay their own level `layers/0`, embeddings -> `embedding`, norms -> `scale`, linear
  weights -> `kernel` transposed; the `position_ids` buffer is not a parameter).
The file format is flax.serialization.to_bytes: nested msgpack maps, every array an ext type 1
whose payload is msgpack (shape, dtype name, C-order bytes). bf16 leaves round float32 to
nearest even, as `jnp.asarray(x, jnp.bfloat16)` does.
"""
import json
import os
import re
import shutil
import struct
import sys

import msgpack
import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(buf[8 + n + b:8 + n + e], dtype="<f4").reshape(info["shape"])
    return out


def rename_key(key):  # diffusers' rename_key
    for pat in re.findall(r"\w+[.]\d+", key):
        key = key.replace(pat, "_".join(pat.split(".")))
    return key


VAE_ATTENTION = {"to_out_0": "proj_attn", "to_k": "key", "to_v": "value", "to_q": "query"}


def diffusers_to_flax(pt_key, tensor, is_vae):
    key = tuple(rename_key(pt_key).split("."))
    if is_vae and len(key) > 1 and key[-2] in VAE_ATTENTION:
        leaf = "kernel" if key[-1] == "weight" else key[-1]
        return key[:-2] + (VAE_ATTENTION[key[-2]], leaf), (tensor.T if leaf == "kernel" else tensor)
    return reshape_leaf(key, tensor)


def reshape_leaf(key, tensor):
    if key[-1] != "weight":
        return key, tensor
    if tensor.ndim == 1:
        return key[:-1] + ("scale",), tensor
    if tensor.ndim == 4:
        return key[:-1] + ("kernel",), tensor.transpose(2, 3, 1, 0)
    return key[:-1] + ("kernel",), tensor.T


def transformers_to_flax(pt_key, tensor):
    key = tuple(pt_key.split("."))
    if key[-1] == "weight" and key[-2].endswith("_embedding"):
        return key[:-1] + ("embedding",), tensor
    return reshape_leaf(key, tensor)


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def ndarray_ext(tensor, bf16):
    if bf16:
        payload = ((*tensor.shape,), "bfloat16", to_bf16_bits(tensor).tobytes())
    else:
        payload = ((*tensor.shape,), "float32", np.ascontiguousarray(tensor, dtype="<f4").tobytes())
    return msgpack.ExtType(1, msgpack.packb(payload, use_bin_type=True))


def write_msgpack(path, flat, bf16):
    tree = {}
    for key, tensor in flat.items():
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        assert key[-1] not in node, key
        node[key[-1]] = ndarray_ext(tensor, bf16)
    with open(path, "wb") as f:
        f.write(msgpack.packb(tree, use_bin_type=True, strict_types=True))


FLAX_CLASSES = {"unet": "FlaxUNet2DConditionModel", "vae": "FlaxAutoencoderKL"}


def write_component(src, dst, name, bf16):
    os.makedirs(os.path.join(dst, name), exist_ok=True)
    if name == "text_encoder":
        weights = read_safetensors(os.path.join(src, name, "model.safetensors"))
        flat = dict(transformers_to_flax(k, v) for k, v in weights.items() if not k.endswith("position_ids"))
        write_msgpack(os.path.join(dst, name, "flax_model.msgpack"), flat, bf16)
        shutil.copy(os.path.join(src, name, "config.json"), os.path.join(dst, name, "config.json"))
        return
    weights = read_safetensors(os.path.join(src, name, "diffusion_pytorch_model.safetensors"))
    flat = dict(diffusers_to_flax(k, v, name == "vae") for k, v in weights.items())
    write_msgpack(os.path.join(dst, name, "diffusion_flax_model.msgpack"), flat, bf16)
    with open(os.path.join(src, name, "config.json")) as f:
        config = json.load(f)
    config["_class_name"] = FLAX_CLASSES[name]
    with open(os.path.join(dst, name, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def write_folder(src, dst, bf16):
    os.makedirs(dst, exist_ok=True)
    for name in ("text_encoder", "unet", "vae"):
        write_component(src, dst, name, bf16)
    for name in ("tokenizer", "scheduler"):
        shutil.copytree(os.path.join(src, name), os.path.join(dst, name), dirs_exist_ok=True)
    with open(os.path.join(src, "model_index.json")) as f:
        index = json.load(f)
    index["_class_name"] = "FlaxStableDiffusionPipeline"
    index["text_encoder"] = ["transformers", "FlaxCLIPTextModel"]
    index["unet"] = ["diffusers", "FlaxUNet2DConditionModel"]
    index["vae"] = ["diffusers", "FlaxAutoencoderKL"]
    index["scheduler"] = ["diffusers", "FlaxPNDMScheduler"]
    for unused in ("feature_extractor", "image_encoder"):
        index.pop(unused, None)
    with open(os.path.join(dst, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    write_folder(src, os.path.join(out, "f32"), bf16=False)
    write_folder(src, os.path.join(out, "bf16"), bf16=True)


if __name__ == "__main__":
    main()
