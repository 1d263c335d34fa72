#!/usr/bin/python3
"""Tiny random LoRAs for tests/data/tiny-sd, one per file format, and what diffusers computes with them.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_lora_goldens.py tests/data/tiny-sd tests/data/tiny-sd-lora

Writes into the output folder:
  kohya.safetensors          kohya, diffusers-named modules (lora_unet_down_blocks_0_..., lora_te_text_model_...)
  kohya_ldm.safetensors      kohya, LDM-named UNet modules (lora_unet_input_blocks_1_1_..., middle_block, output_blocks)
  peft.safetensors           diffusers/PEFT (unet.<module>.lora_A.weight / lora_B.weight, text_encoder.<module>...)
  diffusers_old.safetensors  diffusers' old attention-processor form (unet.<...>.attn1.processor.to_q_lora.down.weight,
                             text_encoder.<...>.self_attn.to_q_lora.down.weight)
  goldens.safetensors        inputs and outputs (see README.md written beside them)

What diffusers computes (peft is not installed here, transformers neither):
  1. Key conversion by diffusers itself: kohya files go through
     StableDiffusionLoraLoaderMixin.lora_state_dict(state_dict, unet_config=unet.config) (which runs
     _maybe_map_sgm_blocks_to_diffusers for LDM names and _convert_non_diffusers_lora_to_diffusers), then,
     as load_lora_into_unet / load_lora_into_text_encoder do, convert_unet_state_dict_to_peft for the UNet
     part and convert_state_dict_to_diffusers + convert_state_dict_to_peft for the text encoder part. The
     other formats take the same path (lora_state_dict leaves them as they are). The result names each
     module's lora_A / lora_B in diffusers/PEFT terms; the script asserts it is the module it meant.
  2. The merge rule of peft's fuse (LoraLayer.get_delta_weight, as fuse_lora(lora_scale=strength) does):
     W <- W + strength * (alpha / rank) * (B @ A), B and A flattened to matrices for convolutions; alpha
     from the file's `.alpha` (kohya), rank = A.shape[0]; no alpha -> alpha = rank.
  3. diffusers' UNet2DConditionModel (tests/data/tiny-sd/unet config) with the fused state dict, float32,
     one thread, on fixed inputs; the text encoder through a small torch CLIPTextModel reference
     (clip_text_forward below), which is first checked against tests/data/tiny-sd/goldens/text_encoder
     (transformers' own output) on the base weights.
"""
import json
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel  # noqa: E402
from diffusers.loaders.lora_pipeline import StableDiffusionLoraLoaderMixin  # noqa: E402
from diffusers.utils.state_dict_utils import (  # noqa: E402
    convert_state_dict_to_diffusers,
    convert_state_dict_to_peft,
    convert_unet_state_dict_to_peft,
)

from lora_reference import fuse, kohya_alphas, lora_pair, modules_of  # noqa: E402

torch.set_num_threads(1)

# Modules each file changes: diffusers module path -> LDM module path (None: no LDM file uses it).
UNET_MODULES = {
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q": "input_blocks.1.1.transformer_blocks.0.attn1.to_q",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k": "input_blocks.1.1.transformer_blocks.0.attn2.to_k",
    "down_blocks.0.attentions.1.transformer_blocks.0.attn1.to_out.0": "input_blocks.2.1.transformer_blocks.0.attn1.to_out.0",
    "down_blocks.0.attentions.0.proj_in": "input_blocks.1.1.proj_in",            # 1x1 conv
    "down_blocks.0.resnets.0.conv1": "input_blocks.1.0.in_layers.2",            # 3x3 conv
    "down_blocks.1.resnets.0.time_emb_proj": "input_blocks.4.0.emb_layers.1",   # linear
    "mid_block.attentions.0.transformer_blocks.0.ff.net.2": "middle_block.1.transformer_blocks.0.ff.net.2",
    "mid_block.resnets.1.conv2": "middle_block.2.out_layers.3",                 # 3x3 conv
    "up_blocks.1.attentions.2.transformer_blocks.0.attn2.to_v": "output_blocks.5.1.transformer_blocks.0.attn2.to_v",
    "up_blocks.1.attentions.1.proj_out": "output_blocks.4.1.proj_out",          # 1x1 conv
    "up_blocks.0.resnets.1.conv_shortcut": "output_blocks.1.0.skip_connection", # 1x1 conv
}
ATTN_MODULES = [m for m in UNET_MODULES if ".attn1." in m or ".attn2." in m]
TE_MODULES = [
    "text_model.encoder.layers.0.self_attn.q_proj",
    "text_model.encoder.layers.2.self_attn.out_proj",
    "text_model.encoder.layers.1.mlp.fc1",
    "text_model.encoder.layers.4.mlp.fc2",
]
TE_ATTN_MODULES = [m for m in TE_MODULES if ".self_attn." in m]


def kohya_name(prefix, module):
    return prefix + module.replace(".", "_")


def make_file(fmt, unet_sd, te_sd, seed, rank, alpha):
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    if fmt in ("kohya", "kohya_ldm"):
        for module, ldm in UNET_MODULES.items():
            down, up = lora_pair(gen, unet_sd[module + ".weight"], rank)
            name = kohya_name("lora_unet_", ldm if fmt == "kohya_ldm" else module)
            sd[name + ".lora_down.weight"], sd[name + ".lora_up.weight"] = down, up
            sd[name + ".alpha"] = torch.tensor(float(alpha))
        for module in TE_MODULES:
            down, up = lora_pair(gen, te_sd[module + ".weight"], rank)
            name = kohya_name("lora_te_", module)
            sd[name + ".lora_down.weight"], sd[name + ".lora_up.weight"] = down, up
            sd[name + ".alpha"] = torch.tensor(float(alpha))
    elif fmt == "peft":
        for module in UNET_MODULES:
            down, up = lora_pair(gen, unet_sd[module + ".weight"], rank)
            sd["unet." + module + ".lora_A.weight"], sd["unet." + module + ".lora_B.weight"] = down, up
        for module in TE_MODULES:
            down, up = lora_pair(gen, te_sd[module + ".weight"], rank)
            sd["text_encoder." + module + ".lora_A.weight"], sd["text_encoder." + module + ".lora_B.weight"] = down, up
    elif fmt == "diffusers_old":
        for module in ATTN_MODULES:  # attention processors only: to_q/k/v_lora, to_out_lora
            down, up = lora_pair(gen, unet_sd[module + ".weight"], rank)
            block, proj = module.rsplit(".attn", 1)[0], module.split(".attn")[1]  # "…blocks.0", "1.to_q"
            attn, leaf = proj.split(".", 1)
            leaf = "to_out_lora" if leaf == "to_out.0" else leaf + "_lora"
            base = f"unet.{block}.attn{attn}.processor.{leaf}"
            sd[base + ".down.weight"], sd[base + ".up.weight"] = down, up
        for module in TE_ATTN_MODULES:
            down, up = lora_pair(gen, te_sd[module + ".weight"], rank)
            head, leaf = module.rsplit(".", 1)
            leaf = {"q_proj": "to_q_lora", "k_proj": "to_k_lora", "v_proj": "to_v_lora", "out_proj": "to_out_lora"}[leaf]
            base = f"text_encoder.{head}.{leaf}"
            sd[base + ".down.weight"], sd[base + ".up.weight"] = down, up
    return {k: v.contiguous() for k, v in sd.items()}


def diffusers_modules(file_sd, unet_config):
    """diffusers' own key conversion: {(component, module): (A, B, alpha / rank)}."""
    alpha_of = kohya_alphas(file_sd)
    sd, _network_alphas = StableDiffusionLoraLoaderMixin.lora_state_dict(dict(file_sd), unet_config=unet_config)
    unet_part = {k[len("unet."):]: v for k, v in sd.items() if k.startswith("unet.")}
    unet_part.update({k: v for k, v in sd.items() if not k.startswith(("unet.", "text_encoder."))})
    te_part = {k[len("text_encoder."):]: v for k, v in sd.items() if k.startswith("text_encoder.")}
    unet_peft = convert_unet_state_dict_to_peft(unet_part)
    te_peft = convert_state_dict_to_peft(convert_state_dict_to_diffusers(te_part)) if te_part else {}
    return modules_of((("unet", unet_peft), ("text_encoder", te_peft)), alpha_of)


def clip_text_forward(sd, cfg, input_ids):
    """transformers' CLIPTextModel last_hidden_state (quick_gelu, causal mask, no padding mask)."""
    p = "text_model."
    n, L = input_ids.shape
    x = sd[p + "embeddings.token_embedding.weight"][input_ids] + sd[p + "embeddings.position_embedding.weight"][:L]
    heads = cfg["num_attention_heads"]
    d = cfg["hidden_size"] // heads
    mask = torch.full((L, L), float("-inf")).triu(1)
    eps = cfg["layer_norm_eps"]
    ln = lambda t, q: torch.nn.functional.layer_norm(t, (t.shape[-1],), sd[q + ".weight"], sd[q + ".bias"], eps)
    lin = lambda t, q: torch.nn.functional.linear(t, sd[q + ".weight"], sd[q + ".bias"])
    for i in range(cfg["num_hidden_layers"]):
        q = f"{p}encoder.layers.{i}."
        h = ln(x, q + "layer_norm1")
        split = lambda t: t.view(n, L, heads, d).transpose(1, 2)
        qq = split(lin(h, q + "self_attn.q_proj") * d ** -0.5)
        kk, vv = split(lin(h, q + "self_attn.k_proj")), split(lin(h, q + "self_attn.v_proj"))
        att = torch.softmax(qq @ kk.transpose(-1, -2) + mask, dim=-1) @ vv
        x = x + lin(att.transpose(1, 2).reshape(n, L, heads * d), q + "self_attn.out_proj")
        h = lin(ln(x, q + "layer_norm2"), q + "mlp.fc1")
        x = x + lin(h * torch.sigmoid(1.702 * h), q + "mlp.fc2")
    return ln(x, p + "final_layer_norm")


def main(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    unet = UNet2DConditionModel.from_pretrained(os.path.join(model_dir, "unet")).eval()
    unet_sd = {k: v.clone() for k, v in unet.state_dict().items()}
    te_sd = load_file(os.path.join(model_dir, "text_encoder", "model.safetensors"))
    te_cfg = json.load(open(os.path.join(model_dir, "text_encoder", "config.json")))
    ug = load_file(os.path.join(model_dir, "goldens", "unet.safetensors"))
    tg = load_file(os.path.join(model_dir, "goldens", "text_encoder.safetensors"))
    sample, context = ug["sample"], ug["encoder_hidden_states"]
    timestep = int(ug["timesteps"][1])
    input_ids = tg["input_ids"].long()

    base_te = clip_text_forward(te_sd, te_cfg, input_ids)
    err = (base_te - tg["last_hidden_state"]).abs().max().item()
    print(f"text encoder reference vs transformers (tiny-sd goldens): max abs error {err:.3g}")
    assert err < 1e-5, "the torch CLIP reference does not reproduce transformers"

    def unet_out(sd):
        unet.load_state_dict(sd)
        with torch.no_grad():
            return unet(sample, timestep, encoder_hidden_states=context).sample

    # The pipeline: StableDiffusionPipeline on the folder's VAE and scheduler (PNDM), the tiny-sd pipeline
    # goldens' two prompts and initial latents, negative prompt "" (embeddings from the reference text
    # encoder with the same LoRA fused: tokenizer goldens rows 1, 2 and 0), 5 steps, guidance 7.5.
    tok = load_file(os.path.join(model_dir, "goldens", "tokenizer.safetensors"))["input_ids"].long()
    latents_init = load_file(os.path.join(model_dir, "goldens", "pipeline.safetensors"))["latents_init"]
    vae = AutoencoderKL.from_pretrained(os.path.join(model_dir, "vae")).eval()
    scheduler = PNDMScheduler.from_pretrained(os.path.join(model_dir, "scheduler"))

    def pipeline_out(unet_weights, te_weights):
        unet.load_state_dict(unet_weights)
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet, scheduler=scheduler,
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)
        embeds = clip_text_forward(te_weights, te_cfg, tok[[1, 2, 0]])
        out = {}
        for kind in ("latent", "np"):
            with torch.no_grad():
                r = pipe(prompt_embeds=embeds[:2], negative_prompt_embeds=embeds[2:3].repeat(2, 1, 1),
                         num_inference_steps=5, guidance_scale=7.5, latents=latents_init.clone(), output_type=kind,
                         height=64, width=64).images
            out[kind] = torch.as_tensor(r)
        return out["latent"], out["np"]

    goldens = {"sample": sample, "encoder_hidden_states": context, "timestep": torch.tensor([timestep]),
               "input_ids": tg["input_ids"], "unet_base": unet_out(unet_sd), "text_encoder_base": base_te}
    specs = {  # format: (seed, rank, alpha)
        "kohya": (1, 4, 2.0),
        "kohya_ldm": (2, 3, 5.0),
        "peft": (3, 2, None),
        "diffusers_old": (4, 4, None),
    }
    modules_of = {}
    for fmt, (seed, rank, alpha) in specs.items():
        file_sd = make_file(fmt, unet_sd, te_sd, seed, rank, alpha)
        save_file(file_sd, os.path.join(out_dir, fmt + ".safetensors"), metadata={"made_by": "tools/goldens/make_lora_goldens.py"})
        modules = diffusers_modules(file_sd, unet.config)
        expected = {("unet", m) for m in (ATTN_MODULES if fmt == "diffusers_old" else UNET_MODULES)}
        expected |= {("text_encoder", m) for m in (TE_ATTN_MODULES if fmt == "diffusers_old" else TE_MODULES)}
        assert set(modules) == expected, f"{fmt}: diffusers mapped {sorted(set(modules) ^ expected)} differently"
        modules_of[fmt] = modules
        goldens["unet_" + fmt] = unet_out(fuse(unet_sd, modules, "unet", 1.0))
        goldens["text_encoder_" + fmt] = clip_text_forward(fuse(te_sd, modules, "text_encoder", 1.0), te_cfg, input_ids)
        lat, img = pipeline_out(fuse(unet_sd, modules, "unet", 1.0), fuse(te_sd, modules, "text_encoder", 1.0))
        goldens["pipeline_" + fmt + ".latents_final"], goldens["pipeline_" + fmt + ".images"] = lat, img
        print(f"{fmt}: {len(file_sd)} tensors, {len(modules)} modules; UNet output moved by "
              f"{(goldens['unet_' + fmt] - goldens['unet_base']).abs().max().item():.3g}")
    # Two LoRAs at once: kohya at 0.7, then PEFT at -0.5 (one fused after the other).
    sd = fuse(fuse(unet_sd, modules_of["kohya"], "unet", 0.7), modules_of["peft"], "unet", -0.5)
    goldens["unet_kohya0.7_peft-0.5"] = unet_out(sd)
    te = fuse(fuse(te_sd, modules_of["kohya"], "text_encoder", 0.7), modules_of["peft"], "text_encoder", -0.5)
    goldens["text_encoder_kohya0.7_peft-0.5"] = clip_text_forward(te, te_cfg, input_ids)
    lat, img = pipeline_out(sd, te)
    goldens["pipeline_kohya0.7_peft-0.5.latents_final"], goldens["pipeline_kohya0.7_peft-0.5.images"] = lat, img
    lat, img = pipeline_out(unet_sd, te_sd)
    goldens["pipeline_base.latents_final"], goldens["pipeline_base.images"] = lat, img
    save_file({k: v.contiguous() for k, v in goldens.items()}, os.path.join(out_dir, "goldens.safetensors"),
              metadata={"made_by": "tools/goldens/make_lora_goldens.py", "diffusers": "0.31.0",
                        "torch": torch.__version__, "timestep": str(timestep)})
    print("wrote", out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
