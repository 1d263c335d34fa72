#!/usr/bin/python3
"""Tiny random SDXL LoRAs for tests/data/tiny-sdxl, one per file format, and what diffusers computes with them.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_sdxl_lora_goldens.py tests/data/tiny-sdxl tests/data/tiny-sdxl-lora

Writes into the output folder:
  kohya.safetensors      kohya, diffusers-named UNet modules (lora_unet_down_blocks_1_attentions_0_...),
                         lora_te1_ (text_encoder) and lora_te2_ (text_encoder_2), 0-dim .alpha
  kohya_ldm.safetensors  kohya as sd-scripts writes SDXL files: LDM-named UNet modules (lora_unet_input_blocks_4_1_
                         transformer_blocks_0_attn1_to_q, middle_block_1_..., output_blocks_2_1_transformer_blocks_1_...)
  peft.safetensors       diffusers/PEFT (unet.<module>.lora_A.weight / lora_B.weight, text_encoder.…, text_encoder_2.…)
  goldens.safetensors    inputs and outputs (README.md beside them says what each is)

What diffusers computes (peft is not installed here, transformers neither, so load_lora_weights + fuse_lora cannot
run as such; this does what they do, step by step, with diffusers' own code where it is diffusers' code):
  1. Key conversion by diffusers itself: StableDiffusionXLLoraLoaderMixin.lora_state_dict(state_dict,
     unet_config=unet.config) — for kohya files _maybe_map_sgm_blocks_to_diffusers (LDM names) and
     _convert_non_diffusers_lora_to_diffusers (lora_te1_ -> text_encoder., lora_te2_ -> text_encoder_2.) — then, as
     load_lora_weights -> load_lora_into_unet / load_lora_into_text_encoder(prefix="text_encoder" / "text_encoder_2")
     do, convert_unet_state_dict_to_peft for the UNet part and convert_state_dict_to_diffusers +
     convert_state_dict_to_peft for each text-encoder part. The script asserts that this names exactly the modules it
     meant to change.
  2. peft's merge rule, as fuse_lora(lora_scale=strength) applies it (LoraLayer.get_delta_weight):
     W <- W + strength * (alpha / rank) * (B @ A), B and A flattened to matrices for convolutions; alpha from the
     file's .alpha (kohya), rank = A.shape[0]; no alpha -> alpha = rank.
  3. diffusers' UNet2DConditionModel (tiny-sdxl/unet) with the fused state dict and diffusers'
     StableDiffusionXLPipeline on it; the text towers through tools/goldens/clip_text_reference.py (checked against
     tiny-sd's transformers goldens first) on the fused weights, their embeddings passed in as prompt_embeds /
     pooled_prompt_embeds (and the negative ones).
"""
import json
import os
import sys

sys.path.insert(0, "/work/shared/tools")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_NUM_THREADS", "1")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel  # noqa: E402
from diffusers.loaders.lora_pipeline import StableDiffusionXLLoraLoaderMixin  # noqa: E402
from diffusers.utils.state_dict_utils import (  # noqa: E402
    convert_state_dict_to_diffusers,
    convert_state_dict_to_peft,
    convert_unet_state_dict_to_peft,
)

from clip_text_reference import ClipTextReference, check_against_tiny_sd  # noqa: E402
from lora_reference import fuse, kohya_alphas, lora_pair, modules_of  # noqa: E402

torch.set_num_threads(1)

# UNet modules each file changes: diffusers module path -> LDM module path. The tiny SDXL UNet: down level 0 has no
# attention (DownBlock2D), level 2 has two transformer blocks per attention (transformer_layers_per_block [1, 1, 2]).
UNET_MODULES = {
    "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q": "input_blocks.4.1.transformer_blocks.0.attn1.to_q",
    "down_blocks.2.attentions.1.transformer_blocks.1.attn2.to_k": "input_blocks.8.1.transformer_blocks.1.attn2.to_k",
    "down_blocks.2.attentions.0.transformer_blocks.1.ff.net.0.proj":
        "input_blocks.7.1.transformer_blocks.1.ff.net.0.proj",
    "down_blocks.1.attentions.1.proj_in": "input_blocks.5.1.proj_in",               # linear (use_linear_projection)
    "down_blocks.0.resnets.1.conv1": "input_blocks.2.0.in_layers.2",               # 3x3 conv
    "down_blocks.0.downsamplers.0.conv": "input_blocks.3.0.op",                    # 3x3 conv, stride 2
    "down_blocks.1.resnets.0.conv_shortcut": "input_blocks.4.0.skip_connection",   # 1x1 conv
    "down_blocks.2.resnets.0.time_emb_proj": "input_blocks.7.0.emb_layers.1",      # linear
    "mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0": "middle_block.1.transformer_blocks.0.attn1.to_out.0",
    "mid_block.resnets.1.conv2": "middle_block.2.out_layers.3",                    # 3x3 conv
    "up_blocks.0.attentions.2.transformer_blocks.1.attn2.to_v": "output_blocks.2.1.transformer_blocks.1.attn2.to_v",
    "up_blocks.0.upsamplers.0.conv": "output_blocks.2.2.conv",                     # 3x3 conv
    "up_blocks.1.attentions.1.proj_out": "output_blocks.4.1.proj_out",             # linear
    "up_blocks.2.resnets.0.conv_shortcut": "output_blocks.6.0.skip_connection",    # 1x1 conv
}
# (diffusers converts a kohya text-encoder part by its attention names only when some module is an
# out_proj: a file with q_proj but no out_proj would lose its q_proj in diffusers. Real files have all four.)
TE1_MODULES = [
    "text_model.encoder.layers.0.self_attn.q_proj",
    "text_model.encoder.layers.2.self_attn.out_proj",
    "text_model.encoder.layers.3.mlp.fc1",
]
# text_encoder_2 has 3 layers: SDXL's context is hidden_states[-2] (after layer 1); layer 2 and text_projection
# change only the pooled text_embeds.
TE2_MODULES = [
    "text_model.encoder.layers.0.mlp.fc2",
    "text_model.encoder.layers.1.self_attn.v_proj",
    "text_model.encoder.layers.2.self_attn.out_proj",
    "text_projection",
]
COMPONENTS = (("text_encoder", TE1_MODULES, "lora_te1_"), ("text_encoder_2", TE2_MODULES, "lora_te2_"))


def make_file(fmt, unet_sd, te_sds, seed, rank, alpha):
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for module, ldm in UNET_MODULES.items():
        down, up = lora_pair(gen, unet_sd[module + ".weight"], rank)
        if fmt == "peft":
            sd["unet." + module + ".lora_A.weight"], sd["unet." + module + ".lora_B.weight"] = down, up
            continue
        name = "lora_unet_" + (ldm if fmt == "kohya_ldm" else module).replace(".", "_")
        sd[name + ".lora_down.weight"], sd[name + ".lora_up.weight"] = down, up
        sd[name + ".alpha"] = torch.tensor(float(alpha))
    for component, modules, kohya_prefix in COMPONENTS:
        for module in modules:
            down, up = lora_pair(gen, te_sds[component][module + ".weight"], rank)
            if fmt == "peft":
                base = f"{component}.{module}"
                sd[base + ".lora_A.weight"], sd[base + ".lora_B.weight"] = down, up
                continue
            name = kohya_prefix + module.replace(".", "_")
            sd[name + ".lora_down.weight"], sd[name + ".lora_up.weight"] = down, up
            sd[name + ".alpha"] = torch.tensor(float(alpha))
    return {k: v.contiguous() for k, v in sd.items()}


def diffusers_modules(file_sd, unet_config):
    """diffusers' own key conversion: {(component, module): (A, B, alpha / rank)}."""
    alpha_of = kohya_alphas(file_sd)
    sd, _network_alphas = StableDiffusionXLLoraLoaderMixin.lora_state_dict(dict(file_sd), unet_config=unet_config)
    parts = {"unet": {}, "text_encoder": {}, "text_encoder_2": {}}
    for k, v in sd.items():
        comp = k.split(".", 1)[0]
        assert comp in parts, f"lora_state_dict gave key {k} of no component"
        parts[comp][k[len(comp) + 1:]] = v
    peft = {"unet": convert_unet_state_dict_to_peft(parts["unet"])}
    for comp in ("text_encoder", "text_encoder_2"):
        peft[comp] = convert_state_dict_to_peft(convert_state_dict_to_diffusers(parts[comp])) if parts[comp] else {}
    return modules_of(peft.items(), alpha_of)


def fuse_all(base, modules_and_strengths):
    """{component: fused state} after fusing each (modules, strength) in order."""
    out = dict(base)
    for modules, strength in modules_and_strengths:
        out = {comp: fuse(sd, modules, comp, strength) for comp, sd in out.items()}
    return out


def main(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, (err, scale) in check_against_tiny_sd("tests/data/tiny-sd", load_file).items():
        print(f"clip_text_reference vs transformers (tiny-sd goldens) {name}: max abs {err:.3e} (scale {scale:.3e})")
    unet = UNet2DConditionModel.from_pretrained(os.path.join(model_dir, "unet")).eval()
    base = {"unet": {k: v.clone() for k, v in unet.state_dict().items()}}
    configs = {}
    for comp in ("text_encoder", "text_encoder_2"):
        base[comp] = load_file(os.path.join(model_dir, comp, "model.safetensors"))
        configs[comp] = json.load(open(os.path.join(model_dir, comp, "config.json")))
    ug = load_file(os.path.join(model_dir, "goldens", "unet.safetensors"))
    pg = load_file(os.path.join(model_dir, "goldens", "pipeline.safetensors"))
    prompts = json.load(open(os.path.join(model_dir, "goldens", "prompts.json")))
    timestep = int(ug["timesteps"][1])
    ids1, ids2 = pg["input_ids"].long(), pg["input_ids_2"].long()
    neg1, neg2 = pg["negative_input_ids"].long(), pg["negative_input_ids_2"].long()

    def unet_out(sd):
        unet.load_state_dict(sd)
        with torch.no_grad():
            return unet(ug["sample"], timestep, encoder_hidden_states=ug["encoder_hidden_states"],
                        added_cond_kwargs={"text_embeds": ug["text_embeds"], "time_ids": ug["time_ids"]}).sample

    def towers(weights, i1, i2):
        a = ClipTextReference(weights["text_encoder"], configs["text_encoder"])(i1)
        b = ClipTextReference(weights["text_encoder_2"], configs["text_encoder_2"])(i2)
        return torch.cat([a["hidden_states"][-2], b["hidden_states"][-2]], dim=-1), b["text_embeds"]

    base_embeds, base_pooled = towers(base, ids1, ids2)
    err = max((base_embeds - pg["prompt_embeds"]).abs().max().item(), (base_pooled - pg["pooled_prompt_embeds"]).abs().max().item())
    print(f"base towers vs tiny-sdxl pipeline goldens: max abs error {err:.3g}")
    assert err < 1e-6, "the towers do not reproduce tiny-sdxl's prompt embeddings"

    vae = AutoencoderKL.from_pretrained(os.path.join(model_dir, "vae")).eval()
    scheduler = EulerDiscreteScheduler.from_pretrained(os.path.join(model_dir, "scheduler"))

    def pipeline_out(weights):
        unet.load_state_dict(weights["unet"])
        pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None,
                                         tokenizer_2=None, unet=unet, scheduler=scheduler,
                                         force_zeros_for_empty_prompt=True, add_watermarker=False)
        pipe.set_progress_bar_config(disable=True)
        embeds, pooled = towers(weights, ids1, ids2)
        neg_embeds, neg_pooled = towers(weights, neg1.repeat(2, 1), neg2.repeat(2, 1))
        out = {}
        for kind in ("latent", "np"):
            with torch.no_grad():
                r = pipe(prompt_embeds=embeds, pooled_prompt_embeds=pooled, negative_prompt_embeds=neg_embeds,
                         negative_pooled_prompt_embeds=neg_pooled, num_inference_steps=prompts["steps"],
                         guidance_scale=prompts["guidance"], latents=pg["latents_init"].clone(), output_type=kind,
                         height=prompts["size"], width=prompts["size"]).images
            out[kind] = torch.as_tensor(r)
        return out["latent"], out["np"]

    def text_outputs(weights, prefix, goldens):
        a = ClipTextReference(weights["text_encoder"], configs["text_encoder"])(ids1)
        b = ClipTextReference(weights["text_encoder_2"], configs["text_encoder_2"])(ids2)
        goldens[prefix + "text_encoder"] = a["hidden_states"][-2]
        goldens[prefix + "text_encoder_2.penultimate"] = b["hidden_states"][-2]
        goldens[prefix + "text_encoder_2.text_embeds"] = b["text_embeds"]

    goldens = {"timestep": torch.tensor([timestep]), "unet_base": unet_out(base["unet"])}
    text_outputs(base, "base.", goldens)
    specs = {"kohya": (11, 4, 2.0), "kohya_ldm": (12, 3, 5.0), "peft": (13, 2, None)}  # format: (seed, rank, alpha)
    expected = {("unet", m) for m in UNET_MODULES}
    expected |= {(comp, m) for comp, modules, _ in COMPONENTS for m in modules}
    modules_of = {}
    for fmt, (seed, rank, alpha) in specs.items():
        file_sd = make_file(fmt, base["unet"], base, seed, rank, alpha)
        save_file(file_sd, os.path.join(out_dir, fmt + ".safetensors"),
                  metadata={"made_by": "tools/goldens/make_sdxl_lora_goldens.py"})
        modules = diffusers_modules(file_sd, unet.config)
        assert set(modules) == expected, f"{fmt}: diffusers mapped {sorted(set(modules) ^ expected)} differently"
        modules_of[fmt] = modules
        fused = fuse_all(base, [(modules, 1.0)])
        goldens["unet_" + fmt] = unet_out(fused["unet"])
        text_outputs(fused, fmt + ".", goldens)
        lat, img = pipeline_out(fused)
        goldens["pipeline_" + fmt + ".latents_final"], goldens["pipeline_" + fmt + ".images"] = lat, img
        print(f"{fmt}: {len(file_sd)} tensors, {len(modules)} modules; UNet output moved by "
              f"{(goldens['unet_' + fmt] - goldens['unet_base']).abs().max().item():.3g}, pooled by "
              f"{(goldens[fmt + '.text_encoder_2.text_embeds'] - goldens['base.text_encoder_2.text_embeds']).abs().max().item():.3g}")
    # Two LoRAs at once: kohya_ldm at 0.7, then PEFT at -0.5 (one fused after the other).
    fused = fuse_all(base, [(modules_of["kohya_ldm"], 0.7), (modules_of["peft"], -0.5)])
    goldens["unet_kohya_ldm0.7_peft-0.5"] = unet_out(fused["unet"])
    text_outputs(fused, "kohya_ldm0.7_peft-0.5.", goldens)
    lat, img = pipeline_out(fused)
    goldens["pipeline_kohya_ldm0.7_peft-0.5.latents_final"], goldens["pipeline_kohya_ldm0.7_peft-0.5.images"] = lat, img
    lat, img = pipeline_out(base)
    goldens["pipeline_base.latents_final"], goldens["pipeline_base.images"] = lat, img
    err = (img - pg["cfg.images"]).abs().max().item()
    print(f"base pipeline vs tiny-sdxl's cfg goldens: max abs error {err:.3g}")
    assert err < 1e-6, "the base run differs from tiny-sdxl's own cfg golden"
    save_file({k: v.contiguous() for k, v in goldens.items()}, os.path.join(out_dir, "goldens.safetensors"),
              metadata={"made_by": "tools/goldens/make_sdxl_lora_goldens.py", "diffusers": "0.31.0",
                        "torch": torch.__version__, "timestep": str(timestep)})
    print("wrote", out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
