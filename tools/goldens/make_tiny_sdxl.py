#!/usr/bin/python3
"""Tiny random SDXL model + reference tensors from diffusers (tests/data/tiny-sdxl).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_tiny_sdxl.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd] [--out tests/data/tiny-sdxl]

transformers is not available: the text towers run on clip_text_reference.py (beside this
script), which is first checked against tiny-sd's transformers goldens (the script stops if it
disagrees by more than 1e-5 of scale). Token ids come from tiny-sd's transformers goldens
(goldens/tokenizer.safetensors); tokenizer_2 pads with "!" (SDXL's), so its ids are those ids with
every padding position (attention_mask 0) set to the id of "!".

Writes OUT/ in diffusers' StableDiffusionXLPipeline layout:
  text_encoder/, tokenizer/   copies of tiny-sd's (CLIPTextModel, hidden 32, quick_gelu)
  tokenizer_2/                tiny-sd's vocabulary with pad_token "!"
  text_encoder_2/             CLIPTextModelWithProjection: hidden 48, 3 layers, 4 heads, MLP 60,
                              gelu, projection_dim 40 (random weights, seed 2301)
  unet/                       UNet2DConditionModel, SDXL-style: DownBlock2D + 2 CrossAttnDownBlock2D,
                              block_out_channels [8, 16, 16] (4 norm groups), transformer_layers_per_block
                              [1, 1, 2], attention_head_dim [1, 2, 4], linear projections,
                              cross_attention_dim 80 (= 32 + 48), addition_embed_type text_time,
                              addition_time_embed_dim 8, projection_class_embeddings_input_dim 88
                              (= 40 + 6 × 8); torch.manual_seed(2302)
  vae/                        AutoencoderKL [8, 16], 1 layer per block, 4 norm groups,
                              scaling_factor 0.13025 (SDXL's); torch.manual_seed(2303)
  scheduler/                  EulerDiscreteScheduler with SDXL base's settings (leading, offset 1)
  goldens/text_encoder_2.safetensors, unet.safetensors, vae.safetensors, pipeline.safetensors,
  goldens/prompts.json (the prompts behind the ids, and the pipeline settings)
  single_file/tiny_sdxl.safetensors  the same weights in the original (ldm) single-file layout, made
                              by diffusers' scripts/convert_diffusers_to_original_sdxl.py functions
What each tensor is: tests/data/tiny-sdxl/README.md (kept by hand; update it with this script).
"""
import argparse
import json
import os
import shutil
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
ap.add_argument("--shared-tools", default="/work/shared/tools")
ap.add_argument("--tiny-sd", default="tests/data/tiny-sd")
ap.add_argument("--out", default="tests/data/tiny-sdxl")
args = ap.parse_args()

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, args.shared_tools)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diffusers_env  # noqa: E402

diffusers_env.setup(args.diffusers)
import torch  # noqa: E402

torch.set_num_threads(1)
import diffusers  # noqa: E402
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from clip_text_reference import ClipTextReference, check_against_tiny_sd, random_clip_text_state  # noqa: E402

TE2_SEED, UNET_SEED, VAE_SEED, SAMPLE_SEED, LATENTS_SEED, VAE_LATENTS_SEED = 2301, 2302, 2303, 2304, 2305, 2306
TE2_ROWS = [1, 14, 0, 13]      # tokenizer.safetensors rows: plain, truncated, empty, literal <|endoftext|>
PROMPT_ROWS, NEGATIVE_ROW = [1, 14], 4
UNET_TIMESTEPS = [999, 500, 17]
UNET_TIME_IDS = [[32, 32, 0, 0, 32, 32], [48, 40, 4, 8, 32, 32]]
STEPS, GUIDANCE, SIZE = 5, 5.0, 32
MICRO = {"original_size": (48, 40), "crops_coords_top_left": (4, 8), "target_size": (32, 32)}

out, tiny = args.out, args.tiny_sd
gold = os.path.join(out, "goldens")
os.makedirs(gold, exist_ok=True)
provenance = {"diffusers": diffusers.__version__, "torch": torch.__version__,
              "made_by": "tools/goldens/make_tiny_sdxl.py"}


def save(tensors, name):
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(gold, name), metadata=provenance)


def max_err(a, b):
    return float((a - b).abs().max())


# ---- the reference text tower, checked first ----
for name, (err, scale) in check_against_tiny_sd(tiny, load_file).items():
    print(f"clip_text_reference vs transformers (tiny-sd goldens) {name}: max abs {err:.3e} (scale {scale:.3e})")

# ---- the model folder ----
for part in ("text_encoder", "tokenizer"):
    shutil.rmtree(os.path.join(out, part), ignore_errors=True)
    shutil.copytree(os.path.join(tiny, part), os.path.join(out, part))
shutil.rmtree(os.path.join(out, "tokenizer_2"), ignore_errors=True)
shutil.copytree(os.path.join(tiny, "tokenizer"), os.path.join(out, "tokenizer_2"))
for fname in ("special_tokens_map.json", "tokenizer_config.json"):
    path = os.path.join(out, "tokenizer_2", fname)
    with open(path) as f:
        cfg = json.load(f)
    cfg["pad_token"] = "!"
    if "name_or_path" in cfg:
        cfg["name_or_path"] = "octodiff/tiny-sdxl-tokenizer-2"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
with open(os.path.join(tiny, "tokenizer", "vocab.json")) as f:
    PAD2 = json.load(f)["!"]

te2_config = {"architectures": ["CLIPTextModelWithProjection"], "attention_dropout": 0.0, "bos_token_id": 0,
              "eos_token_id": 2, "hidden_act": "gelu", "hidden_size": 48, "initializer_factor": 1.0,
              "initializer_range": 0.02, "intermediate_size": 60, "layer_norm_eps": 1e-05,
              "max_position_embeddings": 77, "model_type": "clip_text_model", "num_attention_heads": 4,
              "num_hidden_layers": 3, "pad_token_id": 1, "projection_dim": 40, "torch_dtype": "float32",
              "vocab_size": 1000}
os.makedirs(os.path.join(out, "text_encoder_2"), exist_ok=True)
te2_state = random_clip_text_state(te2_config, TE2_SEED, projection=True)
save_file(te2_state, os.path.join(out, "text_encoder_2", "model.safetensors"), metadata={"format": "pt"})
with open(os.path.join(out, "text_encoder_2", "config.json"), "w") as f:
    json.dump(te2_config, f, indent=2)
    f.write("\n")
with open(os.path.join(tiny, "text_encoder", "config.json")) as f:
    te1_config = json.load(f)
te1 = ClipTextReference(load_file(os.path.join(tiny, "text_encoder", "model.safetensors")), te1_config)
te2 = ClipTextReference(te2_state, te2_config)

unet_cfg = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=2,
                block_out_channels=[8, 16, 16], norm_num_groups=4,
                down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                transformer_layers_per_block=[1, 1, 2], attention_head_dim=[1, 2, 4],
                use_linear_projection=True, cross_attention_dim=80, addition_embed_type="text_time",
                addition_time_embed_dim=8, projection_class_embeddings_input_dim=88)
torch.manual_seed(UNET_SEED)
unet = UNet2DConditionModel(**unet_cfg).eval()
unet.save_pretrained(os.path.join(out, "unet"), safe_serialization=True)

torch.manual_seed(VAE_SEED)
vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
                    up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16], layers_per_block=1,
                    latent_channels=4, norm_num_groups=4, sample_size=32, scaling_factor=0.13025,
                    force_upcast=True).eval()
vae.save_pretrained(os.path.join(out, "vae"), safe_serialization=True)

# stabilityai/stable-diffusion-xl-base-1.0's scheduler settings (everything else the class default).
scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                   interpolation_type="linear", num_train_timesteps=1000,
                                   prediction_type="epsilon", steps_offset=1, timestep_spacing="leading",
                                   use_karras_sigmas=False)
scheduler.save_pretrained(os.path.join(out, "scheduler"))

pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=None, text_encoder_2=None, tokenizer=None, tokenizer_2=None,
                                 unet=unet, scheduler=scheduler, force_zeros_for_empty_prompt=True,
                                 add_watermarker=False)
with open(os.path.join(out, "model_index.json"), "w") as f:
    index = {"_class_name": "StableDiffusionXLPipeline", "_diffusers_version": diffusers.__version__,
             "feature_extractor": [None, None], "force_zeros_for_empty_prompt": True,
             "image_encoder": [None, None], "scheduler": ["diffusers", "EulerDiscreteScheduler"],
             "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2":
             ["transformers", "CLIPTextModelWithProjection"], "tokenizer": ["transformers", "CLIPTokenizer"],
             "tokenizer_2": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
             "vae": ["diffusers", "AutoencoderKL"]}
    json.dump(index, f, indent=2)
    f.write("\n")

# ---- token ids ----
with open(os.path.join(tiny, "goldens", "prompts.json")) as f:
    tokenizer_prompts = json.load(f)["tokenizer_prompts"]
with open(os.path.join(gold, "prompts.json"), "w") as f:
    json.dump({"text_encoder_2_prompts": [tokenizer_prompts[r] for r in TE2_ROWS],
               "pipeline_prompts": [tokenizer_prompts[r] for r in PROMPT_ROWS],
               "pipeline_negative_prompt": tokenizer_prompts[NEGATIVE_ROW], "steps": STEPS, "guidance": GUIDANCE,
               "size": SIZE, "micro": {k: list(v) for k, v in MICRO.items()}}, f, indent=2)
    f.write("\n")
tok = load_file(os.path.join(tiny, "goldens", "tokenizer.safetensors"))
ids1_all = tok["input_ids"]
ids2_all = torch.where(tok["attention_mask"] == 1, ids1_all, torch.full_like(ids1_all, PAD2))

# ---- text encoder 2 ----
ids2 = ids2_all[TE2_ROWS].clone()
o2 = te2(ids2)
o2_pad_eos = te2(ids1_all[TE2_ROWS].clone())  # the same prompts padded with <|endoftext|> (tokenizer 1's ids)
assert torch.equal(o2["eos_position"], o2_pad_eos["eos_position"])
save({"input_ids": ids2, "input_ids_eos_padded": ids1_all[TE2_ROWS].clone(), "embeddings": o2["hidden_states"][0],
      "penultimate_hidden_state": o2["hidden_states"][-2], "last_hidden_state": o2["last_hidden_state"],
      "pooler_output": o2["pooler_output"], "text_embeds": o2["text_embeds"],
      "text_embeds_eos_padded": o2_pad_eos["text_embeds"],
      "eos_position": o2["eos_position"].to(torch.int64)}, "text_encoder_2.safetensors")


def sdxl_embeddings(rows):
    a = te1(ids1_all[rows].clone())
    b = te2(ids2_all[rows].clone())
    return torch.cat([a["hidden_states"][-2], b["hidden_states"][-2]], dim=-1), b["text_embeds"]


prompt_embeds, pooled = sdxl_embeddings(PROMPT_ROWS)
neg_embeds, neg_pooled = sdxl_embeddings([NEGATIVE_ROW] * len(PROMPT_ROWS))

# ---- UNet ----
sample = torch.randn([2, 4, 16, 16], generator=torch.Generator().manual_seed(SAMPLE_SEED))
time_ids = torch.tensor(UNET_TIME_IDS, dtype=torch.float32)
captured = {}
for mod, key in ((unet.time_proj, "time_proj"), (unet.time_embedding, "temb"), (unet.add_embedding, "aug"),
                 (unet.mid_block, "mid")):
    mod.register_forward_hook(lambda m, i, o, key=key: captured.__setitem__(key, o.detach().clone()))
preds, projs, tembs, augs, mids = [], [], [], [], []
with torch.no_grad():
    for t in UNET_TIMESTEPS:
        preds.append(unet(sample, torch.tensor(t, dtype=torch.int64), encoder_hidden_states=prompt_embeds,
                          added_cond_kwargs={"text_embeds": pooled, "time_ids": time_ids}).sample)
        projs.append(captured["time_proj"])
        tembs.append(captured["temb"])
        augs.append(captured["aug"])
        mids.append(captured["mid"])
save({"sample": sample, "encoder_hidden_states": prompt_embeds, "text_embeds": pooled, "time_ids": time_ids,
      "timesteps": torch.tensor(UNET_TIMESTEPS, dtype=torch.int64), "noise_pred": torch.stack(preds),
      "time_proj": torch.stack(projs), "time_embedding": torch.stack(tembs), "add_embedding": torch.stack(augs),
      "mid_block_out": torch.stack(mids)}, "unet.safetensors")

# ---- VAE ----
vae_latents = torch.randn([1, 4, 16, 16], generator=torch.Generator().manual_seed(VAE_LATENTS_SEED))
with torch.no_grad():
    decoded = vae.decode(vae_latents / vae.config.scaling_factor).sample
save({"latents": vae_latents, "latents_unscaled": vae_latents / vae.config.scaling_factor, "decoded": decoded},
     "vae.safetensors")

# ---- pipeline ----
latents_init = torch.randn([2, 4, 16, 16], generator=torch.Generator().manual_seed(LATENTS_SEED))
pipe_out = {"input_ids": ids1_all[PROMPT_ROWS].clone(), "input_ids_2": ids2_all[PROMPT_ROWS].clone(),
            "negative_input_ids": ids1_all[[NEGATIVE_ROW]].clone(),
            "negative_input_ids_2": ids2_all[[NEGATIVE_ROW]].clone(),
            "prompt_embeds": prompt_embeds, "pooled_prompt_embeds": pooled, "negative_prompt_embeds": neg_embeds,
            "negative_pooled_prompt_embeds": neg_pooled, "latents_init": latents_init}


def run(case, guidance, negative, output_type="np", **extra):
    steps = []

    def on_step_end(p, i, t, kw):
        steps.append(kw["latents"].detach().clone())
        return {}

    kwargs = dict(prompt_embeds=prompt_embeds, pooled_prompt_embeds=pooled, latents=latents_init.clone(),
                  num_inference_steps=STEPS, guidance_scale=guidance, height=SIZE, width=SIZE,
                  output_type=output_type, callback_on_step_end=on_step_end, **extra)
    if negative:
        kwargs.update(negative_prompt_embeds=neg_embeds, negative_pooled_prompt_embeds=neg_pooled)
    with torch.no_grad():
        images = pipe(**kwargs).images
    if output_type == "latent":
        return images
    pipe_out[f"{case}.timesteps"] = pipe.scheduler.timesteps.clone()
    pipe_out[f"{case}.latents_steps"] = torch.stack(steps)
    pipe_out[f"{case}.images"] = torch.from_numpy(images.copy()).to(torch.float32)
    print(case, "timesteps", pipe.scheduler.timesteps.tolist(), "image mean", float(images.mean()))
    return steps[-1]


final = run("cfg", GUIDANCE, True)
latent_out = run("cfg", GUIDANCE, True, output_type="latent")
assert torch.equal(latent_out, final), "output_type='latent' returned other latents than the last step's"
pipe_out["cfg.latents_output"] = latent_out
run("zero_negative", GUIDANCE, False)
run("micro", GUIDANCE, True, **MICRO)
run("nocfg", 1.0, False)
save(pipe_out, "pipeline.safetensors")

# ---- the same weights as one SDXL single-file (ldm) checkpoint, by diffusers' own converter ----
import importlib.util  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "convert_diffusers_to_original_sdxl", os.path.join(args.diffusers, "scripts", "convert_diffusers_to_original_sdxl.py"))
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)
single = {}
for prefix, part, convert in (("model.diffusion_model.", "unet/diffusion_pytorch_model.safetensors",
                               conv.convert_unet_state_dict),
                              ("first_stage_model.", "vae/diffusion_pytorch_model.safetensors",
                               conv.convert_vae_state_dict),
                              ("conditioner.embedders.0.transformer.", "text_encoder/model.safetensors",
                               conv.convert_openai_text_enc_state_dict),
                              ("conditioner.embedders.1.model.", "text_encoder_2/model.safetensors",
                               conv.convert_openclip_text_enc_state_dict)):
    for k, v in convert(load_file(os.path.join(out, part))).items():
        single[prefix + k] = v
single["conditioner.embedders.1.model.text_projection"] = single.pop(
    "conditioner.embedders.1.model.text_projection.weight").T.contiguous()
os.makedirs(os.path.join(out, "single_file"), exist_ok=True)
save_file({k: v.contiguous() for k, v in single.items()}, os.path.join(out, "single_file", "tiny_sdxl.safetensors"),
          metadata=provenance)
print("wrote", out)
