#!/usr/bin/python3
"""Clip skip (A1111's "Clip skip", diffusers' clip_skip) on the tiny models: text embeddings and a
whole pipeline run, computed by diffusers 0.31's own code.

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_clip_skip_goldens.py tests/data/tiny-sd tests/data/tiny-sd-prompts \
        tests/data/tiny-sd-clip-skip

What computes what:
- The embeddings: diffusers' StableDiffusionPipeline.encode_prompt, whose clip_skip branch takes
  text_encoder(ids, output_hidden_states=True)[-1][-(clip_skip + 1)] and passes it through
  text_encoder.text_model.final_layer_norm. transformers is not installed here, so the text encoder it
  calls wraps tools/goldens/clip_text_reference.py (first checked against tiny-sd's transformers
  goldens) and the tokenizer it calls is make_prompt_goldens.py's ClipBpe (first checked against
  tiny-sd's tokenizer goldens).
- A negative prompt is encoded as diffusers encodes a prompt with clip_skip: diffusers 0.31 leaves its
  negative prompts at the last layer (huggingface/diffusers#13796, #13973 propose the change), A1111
  and Octodiff skip the same layers for both, so the negative embeddings here are encode_prompt's
  output for the negative text as the prompt.
- The pipeline: diffusers' StableDiffusionPipeline (tiny-sd's UNet, VAE, PNDM; 5 steps, guidance 7.5;
  tiny-sd's pipeline goldens' two prompts, negative prompt and initial latents) given those embeddings.

Writes <out>/goldens.safetensors (prompts in its __metadata__) and nothing else:
  <encoder>.ids                   (3, 77) int64: the two prompts, then the negative prompt
  <encoder>.skip<N>.embeds        (3, 77, 32): encode_prompt's output at A1111 clip skip N
                                  (diffusers clip_skip N - 1; N = 1: clip_skip None)
  with <encoder> tiny_sd (tiny-sd's text encoder: final LayerNorm weight 1, bias 0) and
  prompts_te (tiny-sd-prompts' text encoder: a final LayerNorm with random weight and bias);
  pipeline_skip2.latents_final    (2, 4, 32, 32) and pipeline_skip2.images (2, 64, 64, 3): the
                                  pipeline at A1111 clip skip 2 with tiny-sd's text encoder.
"""
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_prompt_goldens  # noqa: E402  (sets up diffusers 0.31 and the pystubs)
from clip_text_reference import ClipTextReference, check_against_tiny_sd  # noqa: E402

import torch  # noqa: E402
from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(1)
SKIPS = (1, 2, 3, 5)  # A1111's clip skip; tiny-sd's encoder has 5 layers


class FakeTokenizer:
    """What encode_prompt calls of CLIPTokenizer, on ClipBpe: padding to 77 with <|endoftext|>."""

    model_max_length = 77

    def __init__(self, bpe):
        self.bpe = bpe

    def __call__(self, texts, padding="max_length", max_length=None, truncation=False, return_tensors="pt"):
        texts = [texts] if isinstance(texts, str) else texts
        rows = [[self.bpe.bos] + self.bpe.tokenize(t) + [self.bpe.eos] for t in texts]
        if truncation:
            rows = [r[: max_length - 1] + [self.bpe.eos] if len(r) > max_length else r for r in rows]
        width = max_length if padding == "max_length" else max(len(r) for r in rows)
        ids = torch.tensor([r + [self.bpe.eos] * (width - len(r)) for r in rows], dtype=torch.int64)
        return types.SimpleNamespace(input_ids=ids, attention_mask=(ids != -1).long())

    def batch_decode(self, ids):
        return ["" for _ in ids]


class FakeTextEncoder(torch.nn.Module):
    """CLIPTextModel as encode_prompt calls it: (last_hidden_state, pooler_output[, hidden_states])."""

    def __init__(self, state, config):
        super().__init__()
        self.ref = ClipTextReference(state, config)
        self.config = types.SimpleNamespace(**config)
        norm = torch.nn.LayerNorm(config["hidden_size"], eps=config["layer_norm_eps"])
        p = self.ref.p
        norm.weight.data.copy_(state[p + "final_layer_norm.weight"])
        norm.bias.data.copy_(state[p + "final_layer_norm.bias"])
        self.text_model = types.SimpleNamespace(final_layer_norm=norm)

    @property
    def dtype(self):
        return torch.float32

    def forward(self, ids, attention_mask=None, output_hidden_states=False):
        out = self.ref(ids)
        if output_hidden_states:
            return out["last_hidden_state"], out["pooler_output"], tuple(out["hidden_states"])
        return out["last_hidden_state"], out["pooler_output"]


def encode(encoder, tokenizer, texts, skip):
    """encode_prompt's prompt embeddings for texts at A1111 clip skip `skip`."""
    this = types.SimpleNamespace(text_encoder=encoder, tokenizer=tokenizer, unet=None)
    with torch.no_grad():
        embeds, _ = StableDiffusionPipeline.encode_prompt(this, texts, "cpu", 1, False,
                                                          clip_skip=None if skip == 1 else skip - 1)
    return embeds


def main(tiny_sd, prompts_dir, out_dir):
    settings = json.load(open(os.path.join(tiny_sd, "goldens", "prompts.json")))
    prompts = settings["pipeline_prompts"]
    negative = settings["pipeline_negative_prompt"]
    texts = prompts + [negative]

    errors = check_against_tiny_sd(tiny_sd, load_file)
    print("CLIP text reference vs transformers:", {k: f"{e:.2e}" for k, (e, _) in errors.items()})
    bpe = make_prompt_goldens.ClipBpe(os.path.join(tiny_sd, "tokenizer"))
    tokenizer = FakeTokenizer(bpe)
    tok_goldens = load_file(os.path.join(tiny_sd, "goldens", "tokenizer.safetensors"))["input_ids"]
    for row in (0, 1, 2):
        text = settings["tokenizer_prompts"][row]
        assert torch.equal(tokenizer(text, max_length=77, truncation=True).input_ids[0], tok_goldens[row].long()), \
            f"the tokenizer stand-in disagrees with transformers on {text!r}"

    tensors = {}
    encoders = {}
    for name, folder in (("tiny_sd", tiny_sd), ("prompts_te", prompts_dir)):
        state = load_file(os.path.join(folder, "text_encoder", "model.safetensors"))
        config = json.load(open(os.path.join(folder, "text_encoder", "config.json")))
        encoders[name] = FakeTextEncoder(state, config)
        tensors[name + ".ids"] = tokenizer(texts, max_length=77, truncation=True).input_ids
        for skip in SKIPS:
            embeds = encode(encoders[name], tokenizer, texts, skip)
            tensors[f"{name}.skip{skip}.embeds"] = embeds.contiguous()
            print(f"{name} clip skip {skip}: embeddings {tuple(embeds.shape)}, "
                  f"max abs difference from skip 1 {float((embeds - tensors[f'{name}.skip1.embeds']).abs().max()):.3g}")

    unet = UNet2DConditionModel.from_pretrained(os.path.join(tiny_sd, "unet")).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(tiny_sd, "vae")).eval()
    scheduler = PNDMScheduler.from_pretrained(os.path.join(tiny_sd, "scheduler"))
    latents_init = load_file(os.path.join(tiny_sd, "goldens", "pipeline.safetensors"))["latents_init"]
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    embeds = tensors["tiny_sd.skip2.embeds"]
    for kind, key in (("latent", "latents_final"), ("np", "images")):
        with torch.no_grad():
            r = pipe(prompt_embeds=embeds[:2], negative_prompt_embeds=embeds[2:3].repeat(2, 1, 1),
                     num_inference_steps=5, guidance_scale=7.5, latents=latents_init.clone(), output_type=kind,
                     height=64, width=64).images
        tensors["pipeline_skip2." + key] = torch.as_tensor(r).contiguous()
    print("pipeline at clip skip 2: images", tuple(tensors["pipeline_skip2.images"].shape))

    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "goldens.safetensors"),
              metadata={"prompts": json.dumps(prompts), "negative_prompt": negative,
                        "made_by": "tools/goldens/make_clip_skip_goldens.py"})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
