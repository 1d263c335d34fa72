#!/usr/bin/python3
"""A1111-style prompt encodings with the tiny-sd text encoder: emphasis weights, chunked long
prompts with BREAK, and textual-inversion embeddings.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_prompt_goldens.py tests/data/tiny-sd tests/data/tiny-sd-prompts

What the numbers are: AUTOMATIC1111's formula (modules/prompt_parser.py parse_prompt_attention,
modules/sd_hijack_clip.py FrozenCLIPEmbedderWithCustomWords.tokenize_line / process_tokens with the
"Original" emphasis, modules/sd_hijack.py EmbeddingsWithFixes), written here in Python from our
knowledge of A1111's code (it cannot be downloaded), applied with torch to transformers'
CLIPTextModel computation. transformers itself is not installed here, so CLIPTextModel is the small
torch reference clip_forward below, first checked against tests/data/tiny-sd/goldens/
text_encoder.safetensors (transformers' own output), and the CLIP BPE tokenizer is clip_bpe below,
first checked against goldens/tokenizer.safetensors (transformers' CLIPTokenizer) on the ASCII
prompts (the only kind used here).

Writes into the output folder:
  text_encoder/             tiny-sd's text encoder with another final_layer_norm (weight 1 + 0.1·N(0,1),
                            bias 0.2 + 0.1·N(0,1), seed 4321): tiny-sd's is weight 1, bias 0, so the
                            mean of its last_hidden_state is 0 up to rounding (~3e-8) and A1111's mean
                            restore, z·(mean(z)/mean(z·w)), divides rounding noise by rounding noise.
                            Real checkpoints' final LayerNorms have a bias; this one does too.
  embeddings/tiny-style.safetensors   A1111 layout: emb_params (2, 32)
  embeddings/old-style.safetensors    A1111's older layout: string_to_param.* (1, 32) (+ string_to_token.*)
  embeddings/cat-toy.safetensors      diffusers' learned_embeds layout: "<cat-toy>" (32,)
  goldens.safetensors       per case: <case>.ids (chunks, 77) int64, <case>.multipliers (chunks, 77),
                            <case>.z (1, chunks*77, 32) float32; prompts in __metadata__
  README.md
"""
import json
import os
import re
import sys

import torch

sys.path.insert(0, "/work/shared/tools/pystubs")
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(1)
sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
from diffusers import UNet2DConditionModel  # noqa: E402

CASES = {
    "weighted": "a (photograph:1.3) of an ((astronaut)) riding a [horse], (cat:0.5) in the style of van gogh",
    "break": "a painting of a cat in the style of van gogh BREAK a photograph of an (astronaut:1.2) riding a horse",
    "long": ("a highly detailed digital painting of a majestic castle on a cliff above a stormy ocean, dramatic "
             "clouds, golden hour lighting, cinematic composition, intricate architecture, towering spires, "
             "flying banners, tiny figures on the bridge, crashing waves, sea spray, distant mountains, flocks "
             "of birds, (volumetric light rays:1.4), ultra sharp focus, trending on artstation, masterpiece, "
             "award winning BREAK by greg rutkowski and alphonse mucha"),
    "embeddings": "a photograph of tiny-style riding a (cat-toy:1.2), old-style",
}


# --- CLIP BPE (openai/CLIP simple_tokenizer's algorithm; ASCII text, no ftfy needed) ---------------
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class ClipBpe:
    PAT = re.compile(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[a-z]+|[0-9]|[^\sa-z0-9]+""")

    def __init__(self, folder):
        self.vocab = json.load(open(os.path.join(folder, "vocab.json"), encoding="utf-8"))
        lines = open(os.path.join(folder, "merges.txt"), encoding="utf-8").read().split("\n")[1:]
        merges = [tuple(line.split()) for line in lines if line.strip()]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.bos, self.eos = self.vocab["<|startoftext|>"], self.vocab["<|endoftext|>"]

    def bpe(self, token):
        word = list(token[:-1]) + [token[-1] + "</w>"]
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def tokenize(self, text):  # content ids, no bos/eos (add_special_tokens=False)
        text = " ".join(text.split()).lower()
        ids = []
        for piece in self.PAT.findall(text):
            if piece in ("<|startoftext|>", "<|endoftext|>"):
                ids.append(self.vocab[piece])
                continue
            piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids += [self.vocab[t] for t in self.bpe(piece)]  # the tiny vocabulary has every byte
        return ids


# --- transformers' CLIPTextModel (last_hidden_state) from input embeddings --------------------------
def clip_forward(sd, cfg, inputs_embeds):
    p = "text_model." if "text_model.embeddings.token_embedding.weight" in sd else ""
    n, L, _ = inputs_embeds.shape
    x = inputs_embeds + sd[p + "embeddings.position_embedding.weight"][:L]
    heads = cfg["num_attention_heads"]
    d = cfg["hidden_size"] // heads
    mask = torch.full((L, L), float("-inf")).triu(1)
    eps = cfg["layer_norm_eps"]
    ln = lambda t, q: torch.nn.functional.layer_norm(t, (t.shape[-1],), sd[q + ".weight"], sd[q + ".bias"], eps)
    lin = lambda t, q: torch.nn.functional.linear(t, sd[q + ".weight"], sd[q + ".bias"])
    for i in range(cfg["num_hidden_layers"]):
        q = f"{p}encoder.layers.{i}."
        split = lambda t: t.view(n, L, heads, d).transpose(1, 2)
        h = ln(x, q + "layer_norm1")
        qq = split(lin(h, q + "self_attn.q_proj") * d ** -0.5)
        kk, vv = split(lin(h, q + "self_attn.k_proj")), split(lin(h, q + "self_attn.v_proj"))
        att = torch.softmax(qq @ kk.transpose(-1, -2) + mask, dim=-1) @ vv
        x = x + lin(att.transpose(1, 2).reshape(n, L, heads * d), q + "self_attn.out_proj")
        h = lin(ln(x, q + "layer_norm2"), q + "mlp.fc1")
        x = x + lin(h * torch.sigmoid(1.702 * h), q + "mlp.fc2")
    return ln(x, p + "final_layer_norm")


# --- A1111: prompt_parser.parse_prompt_attention -----------------------------------------------------
RE_ATTENTION = re.compile(r"""
\\\(|\\\)|\\\[|\\]|\\\\|\\|\(|\[|:\s*([+-]?[.\d]+)\s*\)|\)|]|[^\\()\[\]:]+|:
""", re.X)
RE_BREAK = re.compile(r"\s*\bBREAK\b\s*", re.S)


def parse_prompt_attention(text):
    res, round_brackets, square_brackets = [], [], []

    def multiply_range(start, multiplier):
        for p in range(start, len(res)):
            res[p][1] *= multiplier

    for m in RE_ATTENTION.finditer(text):
        text, weight = m.group(0), m.group(1)
        if text.startswith("\\"):
            res.append([text[1:], 1.0])
        elif text == "(":
            round_brackets.append(len(res))
        elif text == "[":
            square_brackets.append(len(res))
        elif weight is not None and round_brackets:
            multiply_range(round_brackets.pop(), float(weight))
        elif text == ")" and round_brackets:
            multiply_range(round_brackets.pop(), 1.1)
        elif text == "]" and square_brackets:
            multiply_range(square_brackets.pop(), 1 / 1.1)
        else:
            for i, part in enumerate(re.split(RE_BREAK, text)):
                if i > 0:
                    res.append(["BREAK", -1])
                res.append([part, 1.0])
    for pos in round_brackets:
        multiply_range(pos, 1.1)
    for pos in square_brackets:
        multiply_range(pos, 1 / 1.1)
    if not res:
        res = [["", 1.0]]
    i = 0
    while i + 1 < len(res):
        if res[i][1] == res[i + 1][1]:
            res[i][0] += res[i + 1][0]
            res.pop(i + 1)
        else:
            i += 1
    return res


# --- A1111: sd_hijack_clip tokenize_line (comma backtrack off) + embedding lookup --------------------
def tokenize_line(tok, line, embeddings):
    """embeddings: name -> (n, 32) tensor. Returns chunks [(ids[77], multipliers[77], fixes[(pos, vec)])]."""
    names = sorted(((tok.tokenize(name), vec) for name, vec in embeddings.items()), key=lambda e: -len(e[0]))
    chunks, cur = [], {"t": [], "m": [], "f": []}

    def next_chunk():
        pad = 75 - len(cur["t"])
        ids = [tok.bos] + cur["t"] + [tok.eos] * (pad + 1)
        mult = [1.0] + cur["m"] + [1.0] * (pad + 1)
        chunks.append((ids, mult, cur["f"]))
        cur.update(t=[], m=[], f=[])

    for text, weight in parse_prompt_attention(line):
        if text == "BREAK" and weight == -1:
            next_chunk()
            continue
        tokens, position = tok.tokenize(text), 0
        while position < len(tokens):
            if len(cur["t"]) == 75:
                next_chunk()
            found = next(((ids, vec) for ids, vec in names if tokens[position:position + len(ids)] == ids), None)
            if found is None:
                cur["t"].append(tokens[position])
                cur["m"].append(weight)
                position += 1
                continue
            ids, vec = found
            if len(cur["t"]) + vec.shape[0] > 75:
                next_chunk()
            cur["f"].append((len(cur["t"]) + 1, vec))  # EmbeddingsWithFixes: offset + 1 (bos)
            cur["t"] += [0] * vec.shape[0]
            cur["m"] += [weight] * vec.shape[0]
            position += len(ids)
    if cur["t"] or not chunks:
        next_chunk()
    return chunks


# --- A1111: process_tokens + EmphasisOriginal, one chunk at a time, concatenated -----------------------
def encode(sd, cfg, tok, line, embeddings):
    chunks = tokenize_line(tok, line, embeddings)
    zs = []
    for ids, mult, fixes in chunks:
        e = sd_token_embedding(sd)[torch.tensor([ids])].clone()
        for pos, vec in fixes:
            e[0, pos:pos + vec.shape[0]] = vec
        with torch.no_grad():
            z = clip_forward(sd, cfg, e)
        multipliers = torch.asarray(mult)  # float32, as A1111's torch.asarray(batch_multipliers)
        original_mean = z.mean()
        z = z * multipliers.reshape(multipliers.shape + (1,)).expand(z.shape)
        new_mean = z.mean()
        zs.append(z * (original_mean / new_mean))
    ids = torch.tensor([c[0] for c in chunks], dtype=torch.int64)
    mults = torch.tensor([c[1] for c in chunks], dtype=torch.float32)
    return ids, mults, torch.cat(zs, dim=1)


def sd_token_embedding(sd):
    p = "text_model." if "text_model.embeddings.token_embedding.weight" in sd else ""
    return sd[p + "embeddings.token_embedding.weight"]


def check_references(model_dir, sd, cfg, tok):
    tg = load_file(os.path.join(model_dir, "goldens", "text_encoder.safetensors"))
    with torch.no_grad():
        z = clip_forward(sd, cfg, sd_token_embedding(sd)[tg["input_ids"].long()])
    err = (z - tg["last_hidden_state"]).abs().max().item()
    print(f"torch CLIP reference vs transformers (tiny-sd goldens): max abs error {err:.3g}")
    assert err < 1e-5
    prompts = json.load(open(os.path.join(model_dir, "goldens", "prompts.json")))["tokenizer_prompts"]
    golden_ids = load_file(os.path.join(model_dir, "goldens", "tokenizer.safetensors"))["input_ids"]
    for row in (1, 2, 4, 14):  # ASCII prompts
        ids = [tok.bos] + tok.tokenize(prompts[row])[:75] + [tok.eos]
        ids += [tok.eos] * (77 - len(ids))
        assert ids == golden_ids[row].tolist(), f"clip_bpe differs from transformers on prompt {row}"
    print("clip_bpe reproduces transformers' CLIPTokenizer on prompts 1, 2, 4, 14")


def write_text_encoder(model_dir, out_dir, sd):
    g = torch.Generator().manual_seed(4321)
    p = "text_model.final_layer_norm."
    width = sd[p + "weight"].shape[0]
    sd = dict(sd)
    sd[p + "weight"] = 1 + 0.1 * torch.randn(width, generator=g)
    sd[p + "bias"] = 0.2 + 0.1 * torch.randn(width, generator=g)
    os.makedirs(os.path.join(out_dir, "text_encoder"), exist_ok=True)
    save_file(sd, os.path.join(out_dir, "text_encoder", "model.safetensors"))
    with open(os.path.join(model_dir, "text_encoder", "config.json")) as src:
        open(os.path.join(out_dir, "text_encoder", "config.json"), "w").write(src.read())
    return sd


def write_embeddings(out_dir, width):
    out_dir = os.path.join(out_dir, "embeddings")
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(4321)
    tiny = torch.randn(2, width, generator=g) * 0.5
    old = torch.randn(1, width, generator=g) * 0.5
    cat_toy = torch.randn(width, generator=g) * 0.5
    save_file({"emb_params": tiny}, os.path.join(out_dir, "tiny-style.safetensors"))
    save_file({"string_to_param.*": old, "string_to_token.*": torch.tensor([265], dtype=torch.int64)},
              os.path.join(out_dir, "old-style.safetensors"))
    save_file({"<cat-toy>": cat_toy}, os.path.join(out_dir, "cat-toy.safetensors"))
    return {"tiny-style": tiny, "old-style": old, "cat-toy": cat_toy.reshape(1, width)}


def main(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    sd = load_file(os.path.join(model_dir, "text_encoder", "model.safetensors"))
    cfg = json.load(open(os.path.join(model_dir, "text_encoder", "config.json")))
    tok = ClipBpe(os.path.join(model_dir, "tokenizer"))
    check_references(model_dir, sd, cfg, tok)
    sd = write_text_encoder(model_dir, out_dir, sd)
    embeddings = write_embeddings(out_dir, cfg["hidden_size"])
    tensors = {}
    for case, prompt in CASES.items():
        ids, mults, z = encode(sd, cfg, tok, prompt, embeddings if case == "embeddings" else {})
        print(f"{case}: {ids.shape[0]} chunk(s), z {tuple(z.shape)}")
        tensors.update({f"{case}.ids": ids, f"{case}.multipliers": mults, f"{case}.z": z.contiguous()})
    unet = UNet2DConditionModel.from_pretrained(os.path.join(model_dir, "unet")).eval()
    sample = load_file(os.path.join(model_dir, "goldens", "unet.safetensors"))["sample"]
    context = torch.cat([tensors["break.z"], tensors["long.z"][:, :154]], dim=0)
    with torch.no_grad():
        noise_pred = unet(sample, 500, encoder_hidden_states=context).sample
    tensors.update({"unet154.context": context, "unet154.timestep": torch.tensor([500], dtype=torch.int64),
                    "unet154.noise_pred": noise_pred})
    print(f"unet with a 154-token context: noise_pred {tuple(noise_pred.shape)}")
    save_file(tensors, os.path.join(out_dir, "goldens.safetensors"), metadata={"prompts": json.dumps(CASES)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
