"""A small torch reference of transformers' CLIPVisionModel (and of the CLIP encoder layer it
shares with CLIPTextModel), written from transformers 4.48's modeling_clip.py because
transformers itself is not available offline. Parameter names are transformers' own, so a
state_dict of CLIPVisionModel loads into it unchanged:

  embeddings.patch_embedding (Conv2d, kernel = stride = patch_size, no bias)
  embeddings.class_embedding (hidden,), embeddings.position_embedding (positions × hidden)
  pre_layrnorm, encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1, mlp.fc2}
  post_layernorm (applied to the class token: the pooled output)

Eager attention: q·scale, softmax in float32, an additive causal mask for the text tower only.
"""
import torch
from torch import nn


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class ClipAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.scale = self.head_dim ** -0.5
        self.q_proj, self.k_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.v_proj, self.out_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x, causal):
        b, l, c = x.shape
        split = lambda t: t.view(b, l, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x) * self.scale), split(self.k_proj(x)), split(self.v_proj(x))
        w = q @ k.transpose(-1, -2)
        if causal:
            w = w + torch.full((l, l), float("-inf")).triu(1)
        w = torch.softmax(w, dim=-1, dtype=torch.float32)
        return self.out_proj((w @ v).transpose(1, 2).reshape(b, l, c))


class ClipMlp(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden)

    def forward(self, x):
        return self.fc2(quick_gelu(self.fc1(x)))


class ClipEncoderLayer(nn.Module):
    def __init__(self, hidden, intermediate, heads, eps):
        super().__init__()
        self.self_attn = ClipAttention(hidden, heads)
        self.layer_norm1 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = ClipMlp(hidden, intermediate)
        self.layer_norm2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, causal=False):
        x = x + self.self_attn(self.layer_norm1(x), causal)
        return x + self.mlp(self.layer_norm2(x))


class ClipEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(
            ClipEncoderLayer(cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"],
                             cfg.get("layer_norm_eps", 1e-5)) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, x, causal=False):
        for layer in self.layers:
            x = layer(x, causal)
        return x


class ClipVisionEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, p = cfg["hidden_size"], cfg["patch_size"]
        self.class_embedding = nn.Parameter(torch.randn(h))
        self.patch_embedding = nn.Conv2d(cfg.get("num_channels", 3), h, kernel_size=p, stride=p, bias=False)
        self.num_positions = (cfg["image_size"] // p) ** 2 + 1
        self.position_embedding = nn.Embedding(self.num_positions, h)

    def forward(self, pixel_values):
        b = pixel_values.shape[0]
        patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(b, 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding.weight[None]


class ClipVisionTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg.get("layer_norm_eps", 1e-5)
        self.embeddings = ClipVisionEmbeddings(cfg)
        self.pre_layrnorm = nn.LayerNorm(cfg["hidden_size"], eps=eps)
        self.encoder = ClipEncoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg["hidden_size"], eps=eps)

    def forward(self, pixel_values):
        x = self.encoder(self.pre_layrnorm(self.embeddings(pixel_values)))
        return x, self.post_layernorm(x[:, 0, :])


class ClipVisionModel(nn.Module):
    """CLIPVisionModel: forward(pixel_values) -> (last_hidden_state, pooler_output)."""

    def __init__(self, cfg):
        super().__init__()
        self.vision_model = ClipVisionTransformer(cfg)

    def forward(self, pixel_values):
        return self.vision_model(pixel_values)


class ClipTextReference(nn.Module):
    """The text tower from the same encoder layers (causal), to check them against goldens that
    transformers' CLIPTextModel computed (tests/data/tiny-sd/goldens/text_encoder.safetensors)."""

    def __init__(self, cfg):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.position_embedding = nn.Embedding(cfg["max_position_embeddings"], cfg["hidden_size"])
        self.encoder = ClipEncoder(cfg)
        self.final_layer_norm = nn.LayerNorm(cfg["hidden_size"], eps=cfg.get("layer_norm_eps", 1e-5))

    def load_transformers_state(self, state):
        p = "text_model."
        mine = {k[len(p):].replace("embeddings.", ""): v for k, v in state.items()
                if k.startswith(p) and not k.endswith("position_ids")}
        self.load_state_dict(mine, strict=True)

    def forward(self, ids):
        x = self.token_embedding(ids) + self.position_embedding.weight[None, :ids.shape[1]]
        return self.final_layer_norm(self.encoder(x, causal=True))
