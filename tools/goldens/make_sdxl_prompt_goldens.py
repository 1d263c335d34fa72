#!/usr/bin/python3
"""A1111-style SDXL prompt encodings with the tiny SDXL's two text towers, and whole
StableDiffusionXLPipeline runs given them (tests/data/tiny-sdxl-prompts).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_sdxl_prompt_goldens.py tests/data/tiny-sdxl tests/data/tiny-sdxl-prompts

What the numbers are: AUTOMATIC1111's reading of a prompt for SDXL — parse_prompt_attention,
tokenize_line (75-token chunks, BREAK, embeddings) and process_tokens with the "Original" emphasis,
run by each of SDXL's two embedders on its own (FrozenCLIPEmbedderForSDXLWithCustomWords on
hidden_states[-2] of CLIP ViT-L, FrozenOpenCLIPEmbedder2WithCustomWords on the penultimate layer of
OpenCLIP bigG plus its pooled projection), the two outputs concatenated on the last axis, the
pooled embedding the second tower's of the first chunk (zs[0].pooled, before the emphasis). The
A1111 pieces are make_prompt_goldens.py's (written from our knowledge of A1111's code; checked
there and here: ClipBpe against transformers' tokenizer goldens). The towers are
clip_text_reference.py (transformers is not installed), checked first against tiny-sd's
transformers goldens; transformers' inputs_embeds path is its `inputs_embeds` argument.

Per tower: tokenizer 1 pads a chunk with <|endoftext|>, tokenizer 2 with "!" after the
<|endoftext|> (A1111's id_end/id_pad); an SDXL embedding gives clip_l's vectors to tower 1 and
clip_g's to tower 2. Weights: z_c·w, then ·mean(z_c)/mean(z_c·w), per chunk and per tower.

Writes into the output folder:
  embeddings/tiny-xl-style.safetensors  SDXL layout: clip_l (2, 32), clip_g (2, 48) (seed 2401)
  embeddings/xl-mark.safetensors        SDXL layout: clip_l (1, 32), clip_g (1, 48)
  goldens.safetensors  per case: <case>.ids_1, <case>.ids_2 (chunks, 77) int64, <case>.multipliers
                       (chunks, 77), <case>.prompt_embeds (1, chunks·77, 80), <case>.pooled (1, 40);
                       prompts in __metadata__ "prompts"
  pipeline.safetensors StableDiffusionXLPipeline (tiny-sdxl's unet, vae, Euler) given those
                       embeddings: prompt_embeds / negative_prompt_embeds (1, 154, 80) (the negative's
                       one chunk padded with the empty prompt's encoding), the pooled ones (1, 40),
                       latents_init (1, 4, 16, 16, seed 2405), <case>.latents (final), <case>.images
                       (1, 32, 32, 3): cases cfg (the negative passed) and zero_negative (none:
                       diffusers zeroes it over the prompt's 154 tokens); 5 steps, guidance 5, 32 × 32;
                       the prompts and settings in __metadata__ "settings"
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_prompt_goldens as a1111  # noqa: E402  (sets up torch, diffusers and the safetensors stub)
import torch  # noqa: E402
from clip_text_reference import ClipTextReference, check_against_tiny_sd  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

CASES = {
    "weighted": a1111.CASES["weighted"],
    "break": a1111.CASES["break"],
    "long": a1111.CASES["long"],
    "embeddings": "a photograph of tiny-xl-style riding a (xl-mark:1.2), [tiny-xl-style] by the sea",
}
PIPE = {"prompt": "a (photograph:1.3) of tiny-xl-style riding a horse BREAK in the style of van gogh, [blurry]",
        "negative_prompt": "(ugly:1.2), xl-mark", "steps": 5, "guidance": 5.0, "size": 32, "latents_seed": 2405}


def pad_after_eos(ids, eos, pad):
    """Tokenizer 2's chunk: everything after the first <|endoftext|> (after bos) is the pad token."""
    end = ids.index(eos, 1)
    return ids[:end + 1] + [pad] * (len(ids) - end - 1)


def emphasis(z, mult):
    multipliers = torch.asarray([mult])  # float32 (1, 77), as A1111's torch.asarray(batch_multipliers)
    original_mean = z.mean()
    z = z * multipliers.reshape(multipliers.shape + (1,)).expand(z.shape)
    new_mean = z.mean()
    return z * (original_mean / new_mean)


def tower(ref, ids, fixes):
    e = ref.token_embeddings(torch.tensor([ids])).clone()
    for pos, vec in fixes:
        e[0, pos:pos + vec.shape[0]] = vec
    return ref(torch.tensor([ids]), inputs_embeds=e)


def encode(te1, te2, tok, pad2, line, embeddings):
    """A1111's SDXL conditioning of one prompt: (ids_1, ids_2, multipliers, prompt_embeds, pooled)."""
    chunks_1 = a1111.tokenize_line(tok, line, {k: v["clip_l"] for k, v in embeddings.items()})
    chunks_2 = a1111.tokenize_line(tok, line, {k: v["clip_g"] for k, v in embeddings.items()})
    assert [c[0] for c in chunks_1] == [c[0] for c in chunks_2] and [c[1] for c in chunks_1] == [c[1] for c in chunks_2]
    zs, ids_2, pooled = [], [], None
    for (ids, mult, fixes_1), (_, _, fixes_2) in zip(chunks_1, chunks_2):
        ids2 = pad_after_eos(ids, tok.eos, pad2)
        o1, o2 = tower(te1, ids, fixes_1), tower(te2, ids2, fixes_2)
        zs.append(torch.cat([emphasis(o1["hidden_states"][-2], mult), emphasis(o2["hidden_states"][-2], mult)], -1))
        if pooled is None:
            pooled = o2["text_embeds"]  # the first chunk's, unweighted
        ids_2.append(ids2)
    return (torch.tensor([c[0] for c in chunks_1], dtype=torch.int64), torch.tensor(ids_2, dtype=torch.int64),
            torch.tensor([c[1] for c in chunks_1], dtype=torch.float32), torch.cat(zs, dim=1), pooled)


def check_references(model_dir, te1, te2, tok, pad2):
    tiny_sd = os.path.join(os.path.dirname(model_dir.rstrip("/")), "tiny-sd")
    for name, (err, scale) in check_against_tiny_sd(tiny_sd, load_file).items():
        print(f"clip_text_reference vs transformers (tiny-sd goldens) {name}: max abs {err:.3e} (scale {scale:.3e})")
    sd = load_file(os.path.join(tiny_sd, "text_encoder", "model.safetensors"))
    cfg = json.load(open(os.path.join(tiny_sd, "text_encoder", "config.json")))
    a1111.check_references(tiny_sd, sd, cfg, tok)  # ClipBpe against transformers' CLIPTokenizer
    g = load_file(os.path.join(model_dir, "goldens", "pipeline.safetensors"))
    prompts = json.load(open(os.path.join(model_dir, "goldens", "prompts.json")))["pipeline_prompts"]
    for row, prompt in enumerate(prompts):  # plain prompts: one chunk of each tokenizer, as the SDXL goldens
        ids = a1111.tokenize_line(tok, prompt, {})[0][0]
        assert ids == g["input_ids"][row].tolist(), f"tokenizer 1 ids differ on pipeline prompt {row}"
        assert pad_after_eos(ids, tok.eos, pad2) == g["input_ids_2"][row].tolist(), f"tokenizer 2 ids, prompt {row}"
    t2 = load_file(os.path.join(model_dir, "goldens", "text_encoder_2.safetensors"))
    o = te2(t2["input_ids"], inputs_embeds=te2.token_embeddings(t2["input_ids"]))
    err = max(float((o["hidden_states"][-2] - t2["penultimate_hidden_state"]).abs().max()),
              float((o["text_embeds"] - t2["text_embeds"]).abs().max()))
    print(f"tower 2 through inputs_embeds vs tiny-sdxl goldens: max abs {err:.3e}")
    assert err <= 1e-6


def write_embeddings(out_dir):
    folder = os.path.join(out_dir, "embeddings")
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(2401)
    embeddings = {"tiny-xl-style": {"clip_l": torch.randn(2, 32, generator=g) * 0.1,
                                    "clip_g": torch.randn(2, 48, generator=g) * 0.1},
                  "xl-mark": {"clip_l": torch.randn(1, 32, generator=g) * 0.1,
                              "clip_g": torch.randn(1, 48, generator=g) * 0.1}}
    for name, tensors in embeddings.items():
        save_file(tensors, os.path.join(folder, name + ".safetensors"))
    return embeddings


def pad_to(z, length, empty):
    """z (1, 77k, 80) padded to `length` tokens with the empty prompt's chunk (A1111's pad_cond)."""
    missing = (length - z.shape[1]) // 77
    return z if missing == 0 else torch.cat([z] + [empty] * missing, dim=1)


def run_pipeline(model_dir, cond, pooled, negative):
    unet = UNet2DConditionModel.from_pretrained(os.path.join(model_dir, "unet")).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(model_dir, "vae")).eval()
    scheduler = EulerDiscreteScheduler.from_pretrained(os.path.join(model_dir, "scheduler"))
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None,
                                     tokenizer_2=None, unet=unet, scheduler=scheduler,
                                     force_zeros_for_empty_prompt=True, add_watermarker=False)
    latents = torch.randn([1, 4, 16, 16], generator=torch.Generator().manual_seed(PIPE["latents_seed"]))
    out = {"prompt_embeds": cond, "pooled_prompt_embeds": pooled, "latents_init": latents}
    out.update(negative_prompt_embeds=negative[0], negative_pooled_prompt_embeds=negative[1])
    for case in ("cfg", "zero_negative"):
        kwargs = dict(prompt_embeds=cond, pooled_prompt_embeds=pooled, latents=latents.clone(),
                      num_inference_steps=PIPE["steps"], guidance_scale=PIPE["guidance"], height=PIPE["size"],
                      width=PIPE["size"], output_type="np")
        if case == "cfg":
            kwargs.update(negative_prompt_embeds=negative[0], negative_pooled_prompt_embeds=negative[1])
        with torch.no_grad():
            images = pipe(**kwargs).images
        with torch.no_grad():
            final = pipe(**dict(kwargs, latents=latents.clone(), output_type="latent")).images
        out[f"{case}.images"] = torch.from_numpy(images.copy()).to(torch.float32)
        out[f"{case}.latents"] = final
        print(f"pipeline {case}: timesteps {pipe.scheduler.timesteps.tolist()}, image mean {float(images.mean()):.6f}")
    return out


def main(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tok = a1111.ClipBpe(os.path.join(model_dir, "tokenizer"))
    pad2 = tok.vocab["!"]
    te1 = ClipTextReference(load_file(os.path.join(model_dir, "text_encoder", "model.safetensors")),
                            json.load(open(os.path.join(model_dir, "text_encoder", "config.json"))))
    te2 = ClipTextReference(load_file(os.path.join(model_dir, "text_encoder_2", "model.safetensors")),
                            json.load(open(os.path.join(model_dir, "text_encoder_2", "config.json"))))
    check_references(model_dir, te1, te2, tok, pad2)
    embeddings = write_embeddings(out_dir)
    tensors = {}
    for case, prompt in CASES.items():
        ids_1, ids_2, mults, z, pooled = encode(te1, te2, tok, pad2, prompt, embeddings)
        print(f"{case}: {ids_1.shape[0]} chunk(s), prompt_embeds {tuple(z.shape)}, pooled {tuple(pooled.shape)}")
        tensors.update({f"{case}.ids_1": ids_1, f"{case}.ids_2": ids_2, f"{case}.multipliers": mults,
                        f"{case}.prompt_embeds": z.contiguous(), f"{case}.pooled": pooled.contiguous()})
    save_file(tensors, os.path.join(out_dir, "goldens.safetensors"), metadata={"prompts": json.dumps(CASES)})

    empty = encode(te1, te2, tok, pad2, "", {})[3]
    _, _, _, cond, pooled = encode(te1, te2, tok, pad2, PIPE["prompt"], embeddings)
    _, _, _, neg, neg_pooled = encode(te1, te2, tok, pad2, PIPE["negative_prompt"], embeddings)
    neg = pad_to(neg, cond.shape[1], empty)
    print(f"pipeline: prompt_embeds {tuple(cond.shape)}, negative_prompt_embeds {tuple(neg.shape)}")
    out = run_pipeline(model_dir, cond, pooled, (neg, neg_pooled))
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(out_dir, "pipeline.safetensors"),
              metadata={"settings": json.dumps(PIPE), "made_by": "tools/goldens/make_sdxl_prompt_goldens.py"})
    print("wrote", out_dir)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
