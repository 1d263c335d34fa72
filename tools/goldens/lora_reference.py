"""The LoRA arithmetic the LoRA golden scripts share (make_lora_goldens.py, make_sdxl_lora_goldens.py):
random low-rank pairs for a weight, the alphas of kohya files, the (A, B, alpha / rank) of each module
after diffusers' key conversion, and peft's merge rule. Import it after diffusers_env.setup (it uses torch).
"""
import torch


def lora_pair(gen, weight, rank):
    """(down, up): down (rank, in, kh, kw) / (rank, in), up (out, rank, 1, 1) / (out, rank)."""
    out = weight.shape[0]
    down = torch.randn((rank,) + tuple(weight.shape[1:]), generator=gen) * 0.3
    up = torch.randn((out, rank) + ((1, 1) if weight.dim() == 4 else ()), generator=gen) * 0.3
    return down, up


def kohya_alphas(file_sd):
    """id(down tensor) -> alpha: kohya files keep each pair's alpha beside it (<module>.alpha)."""
    alpha_of = {}
    for k, v in file_sd.items():
        if k.endswith(".lora_down.weight"):
            a = file_sd.get(k[: -len(".lora_down.weight")] + ".alpha")
            if a is not None:
                alpha_of[id(v)] = float(a)
    return alpha_of


def modules_of(peft_by_component, alpha_of):
    """{(component, module): (A, B, alpha / rank)} from (component, PEFT-named state dict) pairs; a pair
    without an alpha in alpha_of has alpha = rank."""
    out = {}
    for comp, peft in peft_by_component:
        for k, a in peft.items():
            if not k.endswith(".lora_A.weight"):
                continue
            module = k[: -len(".lora_A.weight")]
            b = peft[module + ".lora_B.weight"]
            rank = a.shape[0]
            out[(comp, module)] = (a, b, alpha_of.get(id(a), rank) / rank)
    return out


def fuse(base_sd, modules, component, strength):
    """peft's merge rule (LoraLayer.get_delta_weight, as fuse_lora(lora_scale=strength) applies it) for
    the modules of `component`: W <- W + strength * (alpha / rank) * (B @ A), flattened for convolutions."""
    sd = {k: v.clone() for k, v in base_sd.items()}
    for (comp, module), (a, b, scale) in modules.items():
        if comp != component:
            continue
        w = sd[module + ".weight"]
        delta = (b.flatten(1) @ a.flatten(1)).reshape(w.shape)
        sd[module + ".weight"] = w + strength * scale * delta
    return sd
