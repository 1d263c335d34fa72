"""A small torch reference of transformers' CLIPTextModel and CLIPTextModelWithProjection.

transformers is not available here (tools/goldens.md), so the text towers SDXL adds are computed
by this module, which is itself checked against the transformers goldens of tests/data/tiny-sd
(check_against_tiny_sd, run by make_tiny_sdxl.py before it computes anything).

What it computes, as transformers 4.x's CLIPTextTransformer (eager attention):
    x = token_embedding[ids] + position_embedding[0..L)                 hidden_states[0]
    per layer:  x = x + out_proj(softmax(q·kᵀ + causal) · v) on layer_norm1(x)   (q scaled by d^-1/2)
                x = x + fc2(act(fc1(layer_norm2(x))))                    hidden_states[i + 1]
    last_hidden_state = final_layer_norm(x)
    pooler_output = last_hidden_state at the EOS position of each row: eos_token_id == 2 (legacy
        configs, SD and SDXL alike) -> argmax of the ids (first highest id), else the first position
        holding eos_token_id
    text_embeds = text_projection(pooler_output)   (CLIPTextModelWithProjection: no bias)
"""
import math

import torch


def _act(name):
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return torch.nn.functional.gelu
    if name == "gelu_new":
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    raise ValueError(f"hidden_act {name}")


class ClipTextReference:
    def __init__(self, state, config):
        self.p = "text_model." if "text_model.embeddings.token_embedding.weight" in state else ""
        self.s = state
        self.c = config
        self.act = _act(config.get("hidden_act", "quick_gelu"))
        self.eps = config.get("layer_norm_eps", 1e-5)

    def _w(self, name):
        return self.s[self.p + name]

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self._w(name + ".weight"), self._w(name + ".bias"),
                                              self.eps)

    def _lin(self, x, name, bias=True):
        w = self._w(name + ".weight")
        return torch.nn.functional.linear(x, w, self._w(name + ".bias") if bias else None)

    def _attention(self, x, l):
        n, L, C = x.shape
        heads = self.c["num_attention_heads"]
        d = C // heads
        q = self._lin(x, l + "self_attn.q_proj") * d ** -0.5
        k = self._lin(x, l + "self_attn.k_proj")
        v = self._lin(x, l + "self_attn.v_proj")
        q, k, v = (t.view(n, L, heads, d).transpose(1, 2) for t in (q, k, v))
        causal = torch.full((L, L), torch.finfo(torch.float32).min).triu(1)
        w = torch.softmax(q @ k.transpose(-1, -2) + causal, dim=-1)
        o = (w @ v).transpose(1, 2).reshape(n, L, C)
        return self._lin(o, l + "self_attn.out_proj")

    def token_embeddings(self, ids):
        return self._w("embeddings.token_embedding.weight")[ids]

    @torch.no_grad()
    def __call__(self, ids, inputs_embeds=None):
        """inputs_embeds (transformers' argument): token embeddings to use instead of the ids' rows
        (the ids still place the pooled EOS)."""
        n, L = ids.shape
        tokens = self.token_embeddings(ids) if inputs_embeds is None else inputs_embeds
        x = tokens + self._w("embeddings.position_embedding.weight")[:L]
        hidden_states = [x]
        for i in range(self.c["num_hidden_layers"]):
            l = f"encoder.layers.{i}."
            x = x + self._attention(self._ln(x, l + "layer_norm1"), l)
            x = x + self._lin(self.act(self._lin(self._ln(x, l + "layer_norm2"), l + "mlp.fc1")), l + "mlp.fc2")
            hidden_states.append(x)
        last = self._ln(x, "final_layer_norm")
        eos = self.c.get("eos_token_id", 2)
        if eos == 2:
            pos = ids.to(torch.int).argmax(dim=-1)
        else:
            pos = (ids.to(torch.int) == eos).int().argmax(dim=-1)
        pooled = last[torch.arange(n), pos]
        out = {"hidden_states": hidden_states, "last_hidden_state": last, "pooler_output": pooled, "eos_position": pos}
        if "text_projection.weight" in self.s:
            out["text_embeds"] = torch.nn.functional.linear(pooled, self.s["text_projection.weight"])
        return out


def random_clip_text_state(config, seed, projection):
    """Random weights in transformers' CLIPTextModel(WithProjection) names, from one seed: every
    weight, bias and LayerNorm parameter drawn (none left at 0 or 1, so that each one is tested)."""
    g = torch.Generator().manual_seed(seed)
    H, F = config["hidden_size"], config["intermediate_size"]
    layers = config["num_hidden_layers"]

    def n(shape, std):
        return torch.randn(shape, generator=g) * std

    s = {"text_model.embeddings.token_embedding.weight": n((config["vocab_size"], H), 0.02),
         "text_model.embeddings.position_embedding.weight": n((config["max_position_embeddings"], H), 0.01)}
    attn_std = H ** -0.5 * (2 * layers) ** -0.5
    for i in range(layers):
        p = f"text_model.encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[p + f"self_attn.{proj}.weight"] = n((H, H), attn_std if proj != "out_proj" else H ** -0.5)
            s[p + f"self_attn.{proj}.bias"] = n((H,), 0.02)
        for ln in ("layer_norm1", "layer_norm2"):
            s[p + ln + ".weight"] = 1 + n((H,), 0.1)
            s[p + ln + ".bias"] = n((H,), 0.1)
        s[p + "mlp.fc1.weight"] = n((F, H), (2 * H) ** -0.5)
        s[p + "mlp.fc1.bias"] = n((F,), 0.02)
        s[p + "mlp.fc2.weight"] = n((H, F), F ** -0.5)
        s[p + "mlp.fc2.bias"] = n((H,), 0.02)
    s["text_model.final_layer_norm.weight"] = 1 + n((H,), 0.1)
    s["text_model.final_layer_norm.bias"] = n((H,), 0.1)
    if projection:
        s["text_projection.weight"] = n((config["projection_dim"], H), H ** -0.5)
    return s


def check_against_tiny_sd(tiny_sd_dir, load_file):
    """The reference against transformers' own outputs for tiny-sd's text encoder; returns the errors."""
    import json
    import os
    state = load_file(os.path.join(tiny_sd_dir, "text_encoder", "model.safetensors"))
    with open(os.path.join(tiny_sd_dir, "text_encoder", "config.json")) as f:
        config = json.load(f)
    g = load_file(os.path.join(tiny_sd_dir, "goldens", "text_encoder.safetensors"))
    out = ClipTextReference(state, config)(g["input_ids"])
    pairs = {"embeddings": out["hidden_states"][0], "penultimate_hidden_state": out["hidden_states"][-2],
             "last_hidden_state": out["last_hidden_state"], "pooler_output": out["pooler_output"]}
    errors = {}
    for name, got in pairs.items():
        ref = g[name]
        err = float((got - ref).abs().max())
        scale = float(ref.abs().max())
        errors[name] = (err, scale)
        if not err <= 1e-5 * max(scale, 1.0):
            raise SystemExit(f"the CLIP text reference disagrees with transformers on {name}: {err:.3e} (scale {scale:.3e})")
    return errors
