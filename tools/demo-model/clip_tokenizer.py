"""CLIP BPE tokenizer (the slow transformers CLIPTokenizer's rules, spec tokenizer.md) and a BPE
learner that writes vocab.json / merges.txt in the CLIP format.

Text clean-up implements the plain-ASCII path (collapse whitespace, trim, lower-case), which is
all our captions need; non-ASCII input is rejected rather than tokenised approximately.
"""
import json
import os
import re
from collections import Counter

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MAX_LEN = 77
# ASCII form of the CLIP split regex: [\p{L}]+ -> [a-z]+, [\p{N}] -> [0-9].
_SPLIT = re.compile(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[a-z]+|[0-9]|[^\sa-z0-9]+",
                    re.IGNORECASE)


def bytes_to_unicode():
    """GPT-2 byte table: printable bytes map to themselves, the other 68 to U+0100...U+0143."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_ENCODER = bytes_to_unicode()


def clean(text):
    if not text.isascii():
        raise ValueError(f"only plain ASCII prompts are supported here: {text!r}")
    return " ".join(text.split()).lower()


def pieces(text):
    """Cleaned text -> list of pre-tokenised pieces as byte-character strings."""
    return ["".join(BYTE_ENCODER[b] for b in p.encode("utf-8")) for p in _SPLIT.findall(clean(text))]


def initial_symbols(piece):
    return list(piece[:-1]) + [piece[-1] + "</w>"]


class CLIPTokenizer:
    def __init__(self, folder):
        with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().strip().split("\n")[1:]
        self.ranks = {tuple(line.split()): i for i, line in enumerate(lines)}
        self.bos, self.eos = self.vocab[BOS], self.vocab[EOS]
        self.pad = self.eos  # SD1 style
        self.cache = {BOS: [BOS], EOS: [EOS]}

    def bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        syms = initial_symbols(piece)
        while len(syms) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(syms, syms[1:]))]
            best = min(pairs)[0]
            if best == 1 << 60:
                break
            first, second = next((syms[i], syms[i + 1]) for r, i in pairs if r == best)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == first and syms[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        self.cache[piece] = syms
        return syms

    def encode(self, text):
        """Content ids (no BOS/EOS)."""
        return [self.vocab.get(s, self.eos) for p in pieces(text) for s in self.bpe(p)]

    def encode_padded(self, text, max_len=MAX_LEN):
        ids = [self.bos] + self.encode(text)[:max_len - 2] + [self.eos]
        return ids + [self.pad] * (max_len - len(ids))


def learn_bpe(corpus, out_dir, name="octodiff/demo-model"):
    """Learns merges until every corpus word is one symbol (most frequent pair first; ties broken
    by the pair's string order so the result is deterministic). Writes the four tokenizer files."""
    words = Counter(p for text in corpus for p in pieces(text))
    # ids 0-255: the byte table in its construction order (printable bytes first), as CLIP does.
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    known = set(vocab)
    segs = {w: initial_symbols(w) for w in words}
    merges = []
    while True:
        counts = Counter()
        for w, s in segs.items():
            for pair in zip(s, s[1:]):
                counts[pair] += words[w]
        candidates = [(-c, p) for p, c in counts.items() if p[0] + p[1] not in known]
        if not candidates:
            break
        _, (a, b) = min(candidates)
        merges.append((a, b))
        vocab.append(a + b)
        known.add(a + b)
        for w, s in segs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            segs[w] = out
    vocab += [BOS, EOS]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    added = {"content": None, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}
    special = {"bos_token": dict(added, content=BOS), "eos_token": dict(added, content=EOS),
               "pad_token": EOS, "unk_token": dict(added, content=EOS)}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)
        f.write("\n")
    typed = {k: (dict(v, __type="AddedToken") if isinstance(v, dict) else v) for k, v in special.items()}
    tcfg = {"add_prefix_space": False, "bos_token": typed["bos_token"], "do_lower_case": True,
            "eos_token": typed["eos_token"], "errors": "replace", "model_max_length": MAX_LEN,
            "name_or_path": name, "pad_token": EOS, "special_tokens_map_file": "./special_tokens_map.json",
            "tokenizer_class": "CLIPTokenizer", "unk_token": typed["unk_token"]}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    return len(vocab), len(merges)
