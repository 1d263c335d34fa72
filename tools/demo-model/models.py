"""Our own PyTorch re-implementations of the three Stable Diffusion networks.

Parameter names, shapes and the math follow transformers' CLIPTextModel and diffusers 0.31's
UNet2DConditionModel / AutoencoderKL (torch flavour: exact-erf GELU in GEGLU, Transformer2D
GroupNorm eps 1e-6, VAE GroupNorm eps 1e-6), as described op by op in
/work/shared/spec/models.md. Only the SD1-style subset is implemented (conv proj_in/out,
CrossAttnDownBlock2D/DownBlock2D/UpBlock2D/CrossAttnUpBlock2D, epsilon UNet, KL VAE).
verify_against_goldens.py proves these modules reproduce diffusers on tests/data/tiny-sd.

Each model is built from the dict that its diffusers/transformers config.json holds, so the
exported config is exactly what the modules were trained with.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------------------------
# CLIP text encoder (transformers CLIPTextModel)

class CLIPAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        n, s, c = x.shape
        q = (self.q_proj(x) * self.scale).view(n, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(n, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(n, s, self.heads, self.head_dim).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1)
        return self.out_proj((w @ v).transpose(1, 2).reshape(n, s, c))


class CLIPMLP(nn.Module):
    def __init__(self, hidden, inter, act):
        super().__init__()
        self.act = act
        self.fc1 = nn.Linear(hidden, inter)
        self.fc2 = nn.Linear(inter, hidden)

    def forward(self, x):
        h = self.fc1(x)
        if self.act == "quick_gelu":
            h = h * torch.sigmoid(1.702 * h)
        elif self.act == "gelu":
            h = F.gelu(h)
        else:
            raise ValueError(f"unsupported hidden_act {self.act}")
        return self.fc2(h)


class CLIPEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.self_attn = CLIPAttention(h, cfg["num_attention_heads"])
        self.layer_norm1 = nn.LayerNorm(h, eps=eps)
        self.mlp = CLIPMLP(h, cfg["intermediate_size"], cfg["hidden_act"])
        self.layer_norm2 = nn.LayerNorm(h, eps=eps)

    def forward(self, x, mask):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        return x + self.mlp(self.layer_norm2(x))


class CLIPEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.position_embedding = nn.Embedding(cfg["max_position_embeddings"], cfg["hidden_size"])

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.token_embedding(ids) + self.position_embedding(pos)[None]


class CLIPEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(CLIPEncoderLayer(cfg) for _ in range(cfg["num_hidden_layers"]))


class CLIPTextTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = CLIPEmbeddings(cfg)
        self.encoder = CLIPEncoder(cfg)
        self.final_layer_norm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])


class CLIPTextModel(nn.Module):
    """forward(ids (N,S) int64) -> last_hidden_state (N,S,hidden), causal mask only."""

    def __init__(self, cfg):
        super().__init__()
        self.config = dict(cfg)
        self.text_model = CLIPTextTransformer(cfg)

    def forward(self, ids):
        tm = self.text_model
        x = tm.embeddings(ids)
        s = ids.shape[1]
        mask = torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device).triu(1)
        for layer in tm.encoder.layers:
            x = layer(x, mask)
        return tm.final_layer_norm(x)


# --------------------------------------------------------------------------------------------
# Shared UNet / VAE building blocks (diffusers names)

class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, groups, eps, temb_channels=None):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        if temb_channels is not None:
            self.time_emb_proj = nn.Linear(temb_channels, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x, temb=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if temb is not None:
            h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        if hasattr(self, "conv_shortcut"):
            x = self.conv_shortcut(x)
        return x + h


class Downsample2D(nn.Module):
    """UNet: 3x3 stride-2 conv with `padding` on all sides; VAE (padding 0): pad bottom/right by 1."""

    def __init__(self, c, padding):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=padding)

    def forward(self, x):
        if self.padding == 0:
            x = F.pad(x, (0, 1, 0, 1))
        return self.conv(x)


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def attention(q, k, v, heads):
    """Multi-head scaled dot-product attention, (N,S,C) tensors, scale applied to the product."""
    n, s, c = q.shape
    d = c // heads
    q = q.view(n, s, heads, d).transpose(1, 2)
    k = k.view(n, k.shape[1], heads, d).transpose(1, 2)
    v = v.view(n, v.shape[1], heads, d).transpose(1, 2)
    w = torch.softmax((q @ k.transpose(-1, -2)) * (d ** -0.5), dim=-1)
    return (w @ v).transpose(1, 2).reshape(n, s, c)


class Attention(nn.Module):
    """diffusers Attention: to_q/to_k/to_v (bias configurable), to_out.0 with bias."""

    def __init__(self, query_dim, heads, context_dim=None, bias=False):
        super().__init__()
        context_dim = context_dim or query_dim
        self.heads = heads
        self.to_q = nn.Linear(query_dim, query_dim, bias=bias)
        self.to_k = nn.Linear(context_dim, query_dim, bias=bias)
        self.to_v = nn.Linear(context_dim, query_dim, bias=bias)
        self.to_out = nn.ModuleList([nn.Linear(query_dim, query_dim)])

    def forward(self, x, context=None):
        context = x if context is None else context
        o = attention(self.to_q(x), self.to_k(context), self.to_v(context), self.heads)
        return self.to_out[0](o)


class GEGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2)

    def forward(self, x):
        a, g = self.proj(x).chunk(2, dim=-1)
        return a * F.gelu(g)  # exact erf GELU (torch diffusers)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        # net.1 is a Dropout in diffusers (no parameters); keep the index layout.
        self.net = nn.ModuleList([GEGLU(dim, 4 * dim), nn.Identity(), nn.Linear(4 * dim, dim)])

    def forward(self, x):
        return self.net[2](self.net[0](x))


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, heads, context_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn1 = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.attn2 = Attention(dim, heads, context_dim)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5)
        self.ff = FeedForward(dim)

    def forward(self, x, context):
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        return x + self.ff(self.norm3(x))


class Transformer2DModel(nn.Module):
    """SD1 spatial transformer: GroupNorm(eps 1e-6) -> 1x1 conv proj_in -> block -> proj_out."""

    def __init__(self, c, heads, context_dim, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.proj_in = nn.Conv2d(c, c, 1)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(c, heads, context_dim)])
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x, context):
        n, c, h, w = x.shape
        r = x
        x = self.proj_in(self.norm(x))
        x = x.permute(0, 2, 3, 1).reshape(n, h * w, c)
        x = self.transformer_blocks[0](x, context)
        x = x.reshape(n, h, w, c).permute(0, 3, 1, 2)
        return self.proj_out(x) + r


# --------------------------------------------------------------------------------------------
# UNet2DConditionModel

class UNetBlock(nn.Module):
    """Container for down/up/mid blocks: resnets, optional attentions, optional down/upsamplers."""

    def __init__(self):
        super().__init__()
        self.resnets = nn.ModuleList()


def _heads_list(cfg, n):
    heads = cfg.get("num_attention_heads") or cfg["attention_head_dim"]
    return list(heads) if isinstance(heads, (list, tuple)) else [heads] * n


def timestep_embedding(t, dim, flip_sin_to_cos, shift):
    half = dim // 2
    exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32) / (half - shift)
    emb = t[:, None].float() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    return emb


def guidance_scale_embedding(w, dim):
    """diffusers' LCM get_guidance_scale_embedding: sinusoidal embedding of w*1000 (w = guidance - 1),
    frequencies exp(-ln(10000) i / (dim/2 - 1)), sin then cos. w (N,) -> (N, dim)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    emb = (w.float() * 1000.0)[:, None] * freq[None, :]
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)


class TimestepEmbedding(nn.Module):
    """linear_2(silu(linear_1(x + cond_proj(condition)))); cond_proj (no bias) only for LCM UNets."""

    def __init__(self, cin, cout, cond_proj_dim=None):
        super().__init__()
        if cond_proj_dim:
            self.cond_proj = nn.Linear(cond_proj_dim, cin, bias=False)
        self.linear_1 = nn.Linear(cin, cout)
        self.linear_2 = nn.Linear(cout, cout)

    def forward(self, x, condition=None):
        if condition is not None:
            x = x + self.cond_proj(condition)
        return self.linear_2(F.silu(self.linear_1(x)))


class UNet2DConditionModel(nn.Module):
    """forward(sample (N,C,h,w), timesteps (N,) or scalar, context (N,S,X), timestep_cond (N,P) for
    LCM UNets (config time_cond_proj_dim = P)) -> noise prediction."""

    def __init__(self, cfg):
        super().__init__()
        self.config = dict(cfg)
        boc = list(cfg["block_out_channels"])
        nb = len(boc)
        g, eps, lpb = cfg["norm_num_groups"], cfg["norm_eps"], cfg["layers_per_block"]
        xdim = cfg["cross_attention_dim"]
        heads = _heads_list(cfg, nb)
        temb = boc[0] * 4
        for key, want in [("use_linear_projection", False), ("center_input_sample", False),
                          ("resnet_time_scale_shift", "default"), ("upcast_attention", False),
                          ("time_embedding_type", "positional"), ("transformer_layers_per_block", 1)]:
            if cfg.get(key, want) != want:
                raise ValueError(f"unsupported UNet config {key}={cfg[key]}")
        self.conv_in = nn.Conv2d(cfg["in_channels"], boc[0], 3, padding=1)
        self.time_embedding = TimestepEmbedding(boc[0], temb, cfg.get("time_cond_proj_dim"))

        self.down_blocks = nn.ModuleList()
        cout = boc[0]
        for i, kind in enumerate(cfg["down_block_types"]):
            cin, cout = cout, boc[i]
            b = UNetBlock()
            for j in range(lpb):
                b.resnets.append(ResnetBlock2D(cin if j == 0 else cout, cout, g, eps, temb))
            if kind == "CrossAttnDownBlock2D":
                b.attentions = nn.ModuleList(Transformer2DModel(cout, heads[i], xdim, g) for _ in range(lpb))
            elif kind != "DownBlock2D":
                raise ValueError(f"unsupported down block {kind}")
            if i < nb - 1:
                b.downsamplers = nn.ModuleList([Downsample2D(cout, cfg["downsample_padding"])])
            self.down_blocks.append(b)

        self.mid_block = UNetBlock()
        self.mid_block.resnets.extend([ResnetBlock2D(boc[-1], boc[-1], g, eps, temb) for _ in range(2)])
        self.mid_block.attentions = nn.ModuleList([Transformer2DModel(boc[-1], heads[-1], xdim, g)])

        self.up_blocks = nn.ModuleList()
        rboc, rheads = boc[::-1], heads[::-1]
        cout = rboc[0]
        for i, kind in enumerate(cfg["up_block_types"]):
            prev, cout, cin = cout, rboc[i], rboc[min(i + 1, nb - 1)]
            b = UNetBlock()
            for j in range(lpb + 1):
                skip = cin if j == lpb else cout
                b.resnets.append(ResnetBlock2D((prev if j == 0 else cout) + skip, cout, g, eps, temb))
            if kind == "CrossAttnUpBlock2D":
                b.attentions = nn.ModuleList(Transformer2DModel(cout, rheads[i], xdim, g)
                                             for _ in range(lpb + 1))
            elif kind != "UpBlock2D":
                raise ValueError(f"unsupported up block {kind}")
            if i < nb - 1:
                b.upsamplers = nn.ModuleList([Upsample2D(cout)])
            self.up_blocks.append(b)

        self.conv_norm_out = nn.GroupNorm(g, boc[0], eps=eps)
        self.conv_out = nn.Conv2d(boc[0], cfg["out_channels"], 3, padding=1)

    def forward(self, sample, timesteps, context, timestep_cond=None):
        cfg = self.config
        if not torch.is_tensor(timesteps):
            timesteps = torch.tensor([timesteps], dtype=torch.int64)
        timesteps = timesteps.reshape(-1).expand(sample.shape[0])
        emb = timestep_embedding(timesteps, cfg["block_out_channels"][0], cfg["flip_sin_to_cos"],
                                 cfg["freq_shift"])
        temb = self.time_embedding(emb.to(sample.dtype), timestep_cond)
        x = self.conv_in(sample)
        skips = [x]
        for b in self.down_blocks:
            for j, r in enumerate(b.resnets):
                x = r(x, temb)
                if hasattr(b, "attentions"):
                    x = b.attentions[j](x, context)
                skips.append(x)
            if hasattr(b, "downsamplers"):
                x = b.downsamplers[0](x)
                skips.append(x)
        m = self.mid_block
        x = m.resnets[1](m.attentions[0](m.resnets[0](x, temb), context), temb)
        for b in self.up_blocks:
            for j, r in enumerate(b.resnets):
                x = r(torch.cat([x, skips.pop()], dim=1), temb)
                if hasattr(b, "attentions"):
                    x = b.attentions[j](x, context)
            if hasattr(b, "upsamplers"):
                x = b.upsamplers[0](x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


# --------------------------------------------------------------------------------------------
# AutoencoderKL

class VAEAttention(nn.Module):
    """Mid-block single-head attention with biases and a residual (GroupNorm eps 1e-6)."""

    def __init__(self, c, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        n, c, h, w = x.shape
        t = self.group_norm(x).view(n, c, h * w).transpose(1, 2)
        o = attention(self.to_q(t), self.to_k(t), self.to_v(t), 1)
        o = self.to_out[0](o).transpose(1, 2).reshape(n, c, h, w)
        return o + x


class VAEMidBlock(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock2D(c, c, groups, 1e-6) for _ in range(2)])
        self.attentions = nn.ModuleList([VAEAttention(c, groups)])

    def forward(self, x):
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        boc, g, lpb = cfg["block_out_channels"], cfg["norm_num_groups"], cfg["layers_per_block"]
        self.conv_in = nn.Conv2d(cfg["in_channels"], boc[0], 3, padding=1)
        self.down_blocks = nn.ModuleList()
        cout = boc[0]
        for i in range(len(boc)):
            cin, cout = cout, boc[i]
            b = UNetBlock()
            for j in range(lpb):
                b.resnets.append(ResnetBlock2D(cin if j == 0 else cout, cout, g, 1e-6))
            if i < len(boc) - 1:
                b.downsamplers = nn.ModuleList([Downsample2D(cout, 0)])
            self.down_blocks.append(b)
        self.mid_block = VAEMidBlock(boc[-1], g)
        self.conv_norm_out = nn.GroupNorm(g, boc[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(boc[-1], 2 * cfg["latent_channels"], 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            for r in b.resnets:
                x = r(x)
            if hasattr(b, "downsamplers"):
                x = b.downsamplers[0](x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        boc, g, lpb = cfg["block_out_channels"], cfg["norm_num_groups"], cfg["layers_per_block"]
        rboc = boc[::-1]
        self.conv_in = nn.Conv2d(cfg["latent_channels"], rboc[0], 3, padding=1)
        self.mid_block = VAEMidBlock(rboc[0], g)
        self.up_blocks = nn.ModuleList()
        cout = rboc[0]
        for i in range(len(boc)):
            prev, cout = cout, rboc[i]
            b = UNetBlock()
            for j in range(lpb + 1):
                b.resnets.append(ResnetBlock2D(prev if j == 0 else cout, cout, g, 1e-6))
            if i < len(boc) - 1:
                b.upsamplers = nn.ModuleList([Upsample2D(cout)])
            self.up_blocks.append(b)
        self.conv_norm_out = nn.GroupNorm(g, boc[0], eps=1e-6)
        self.conv_out = nn.Conv2d(boc[0], cfg["out_channels"], 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            for r in b.resnets:
                x = r(x)
            if hasattr(b, "upsamplers"):
                x = b.upsamplers[0](x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = dict(cfg)
        for key in ("use_quant_conv", "use_post_quant_conv", "mid_block_add_attention"):
            if not cfg.get(key, True):
                raise ValueError(f"unsupported VAE config {key}=false")
        lc = cfg["latent_channels"]
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.quant_conv = nn.Conv2d(2 * lc, 2 * lc, 1)
        self.post_quant_conv = nn.Conv2d(lc, lc, 1)

    def moments(self, image):
        """quant_conv(encoder(image)): [mean | logvar] before clamping."""
        return self.quant_conv(self.encoder(image))

    def encode(self, image):
        """Returns (mean, logvar clamped to [-30, 20])."""
        mean, logvar = self.moments(image).chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


def count_params(module):
    return sum(p.numel() for p in module.parameters())
