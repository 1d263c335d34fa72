#!/usr/bin/python3
"""Tiny random LCM-distilled model + reference tensors from diffusers (tests/data/tiny-lcm).

Usage (from the repository root):
    /usr/bin/python3 tools/goldens/make_lcm_goldens.py [--diffusers /work/diffusers-v0.31.0]
        [--shared-tools /work/shared/tools] [--tiny-sd tests/data/tiny-sd] [--out tests/data/tiny-lcm]

Writes:
  OUT/unet/                   UNet2DConditionModel: tiny-sd's UNet config + time_cond_proj_dim 32,
                              random weights (torch.manual_seed(2031), default initialisation)
  OUT/scheduler/              LCMScheduler (LCM-Dreamshaper-v7's settings)
  OUT/text_encoder, tokenizer, vae/   byte-for-byte copies of tiny-sd's
  OUT/model_index.json        LatentConsistencyModelPipeline
  OUT/goldens/unet.safetensors, guidance_embedding.safetensors, pipeline.safetensors
What each tensor is: tests/data/tiny-lcm/README.md (kept by hand; update it with this script).
Rerunning reproduces every file bit for bit (checked: torch 1.13, 1 thread).
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
ap.add_argument("--out", default="tests/data/tiny-lcm")
args = ap.parse_args()

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, args.shared_tools)
import diffusers_env  # noqa: E402

diffusers_env.setup(args.diffusers)
import torch  # noqa: E402

torch.set_num_threads(1)
import diffusers  # noqa: E402
import diffusers.schedulers.scheduling_lcm as scheduling_lcm  # noqa: E402
from diffusers import AutoencoderKL, LatentConsistencyModelPipeline, LCMScheduler, UNet2DConditionModel  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

TIME_COND_PROJ_DIM = 32
UNET_SEED, SAMPLE_SEED, LATENTS_SEED, NOISE_SEED = 2031, 2032, 2033, 2034
UNET_TIMESTEPS = [999, 259]
UNET_GUIDANCE = [8.0, 1.5]  # one per image of the UNet goldens' batch
EMBED_GUIDANCE = [1.0, 1.5, 2.0, 4.0, 8.0, 8.5, 15.0]
EMBED_DIMS = [32, 256, 33]
PIPE_STEPS = [1, 2, 4]
PIPE_GUIDANCE = [8.0, 1.5]

out = args.out
tiny = args.tiny_sd
gold = os.path.join(out, "goldens")
os.makedirs(gold, exist_ok=True)
provenance = {"diffusers": diffusers.__version__, "torch": torch.__version__,
              "made_by": "tools/goldens/make_lcm_goldens.py"}


def save(tensors, name):
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(gold, name), metadata=provenance)


# ---- the model folder ----
for part in ("text_encoder", "tokenizer", "vae"):
    shutil.rmtree(os.path.join(out, part), ignore_errors=True)
    shutil.copytree(os.path.join(tiny, part), os.path.join(out, part))

with open(os.path.join(tiny, "unet", "config.json")) as f:
    unet_cfg = json.load(f)
unet_cfg = {k: v for k, v in unet_cfg.items() if not k.startswith("_")}
unet_cfg["time_cond_proj_dim"] = TIME_COND_PROJ_DIM
torch.manual_seed(UNET_SEED)
unet = UNet2DConditionModel(**unet_cfg).eval()
unet.save_pretrained(os.path.join(out, "unet"), safe_serialization=True)

# LCM-Dreamshaper-v7's scheduler settings (everything else is the class default).
scheduler = LCMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         set_alpha_to_one=True, steps_offset=1, original_inference_steps=50,
                         prediction_type="epsilon", timestep_spacing="leading", clip_sample=False)
scheduler.save_pretrained(os.path.join(out, "scheduler"))
vae = AutoencoderKL.from_pretrained(os.path.join(tiny, "vae")).eval()

pipe = LatentConsistencyModelPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet,
                                      scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                      requires_safety_checker=False)
with open(os.path.join(out, "model_index.json"), "w") as f:
    index = {"_class_name": "LatentConsistencyModelPipeline", "_diffusers_version": diffusers.__version__,
             "feature_extractor": [None, None], "image_encoder": [None, None],
             "requires_safety_checker": False, "safety_checker": [None, None],
             "scheduler": ["diffusers", "LCMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
             "vae": ["diffusers", "AutoencoderKL"]}
    json.dump(index, f, indent=2)
    f.write("\n")


def guidance_embedding(scales, dim):
    # exactly what the pipeline does: w = torch.tensor(guidance_scale - 1), then the embedding
    w = torch.stack([torch.tensor(g - 1) for g in scales])
    return pipe.get_guidance_scale_embedding(w, embedding_dim=dim)


# ---- guidance embedding ----
emb = {"guidance_scales": torch.tensor(EMBED_GUIDANCE, dtype=torch.float64)}
for d in EMBED_DIMS:
    emb[f"dim{d}"] = guidance_embedding(EMBED_GUIDANCE, d)
save(emb, "guidance_embedding.safetensors")

# ---- UNet ----
te = load_file(os.path.join(tiny, "goldens", "text_encoder.safetensors"))
context = te["last_hidden_state"][[0, 1]].clone()
sample = torch.randn([2, 4, 32, 32], generator=torch.Generator().manual_seed(SAMPLE_SEED))
cond = guidance_embedding(UNET_GUIDANCE, TIME_COND_PROJ_DIM)
captured = {}
unet.time_proj.register_forward_hook(lambda m, i, o: captured.__setitem__("time_proj", o.detach().clone()))
unet.time_embedding.register_forward_hook(lambda m, i, o: captured.__setitem__("temb", o.detach().clone()))
preds, projs, tembs = [], [], []
with torch.no_grad():
    for t in UNET_TIMESTEPS:
        preds.append(unet(sample, torch.tensor(t, dtype=torch.int64), encoder_hidden_states=context,
                          timestep_cond=cond).sample)
        projs.append(captured["time_proj"])
        tembs.append(captured["temb"])
save({"sample": sample, "encoder_hidden_states": context, "guidance_scales": torch.tensor(UNET_GUIDANCE,
      dtype=torch.float64), "timestep_cond": cond, "timesteps": torch.tensor(UNET_TIMESTEPS, dtype=torch.int64),
      "noise_pred": torch.stack(preds), "time_proj": torch.stack(projs), "time_embedding": torch.stack(tembs)},
     "unet.safetensors")

# ---- pipeline ----
pipe_gold = load_file(os.path.join(tiny, "goldens", "pipeline.safetensors"))
prompt_embeds = pipe_gold["prompt_embeds"].clone()
latents_init = torch.randn([2, 4, 32, 32], generator=torch.Generator().manual_seed(LATENTS_SEED))
noise = torch.randn([max(PIPE_STEPS) - 1, 2, 4, 32, 32], generator=torch.Generator().manual_seed(NOISE_SEED))

real_randn = scheduling_lcm.randn_tensor
pipe_out = {"prompt_embeds": prompt_embeds, "latents_init": latents_init, "step_noise": noise}
for steps in PIPE_STEPS:
    for g in PIPE_GUIDANCE:
        key = f"n{steps}_g{g:g}"
        used = []

        def injected_noise(shape, generator=None, device=None, dtype=None, layout=None):
            k = len(used)
            assert tuple(shape) == tuple(noise[k].shape), shape
            used.append(k)
            return noise[k].clone().to(dtype)

        latents_steps, denoised_steps = [], []

        def on_step_end(p, i, t, kw):
            latents_steps.append(kw["latents"].detach().clone())
            denoised_steps.append(kw["denoised"].detach().clone())
            return {}

        scheduling_lcm.randn_tensor = injected_noise
        try:
            with torch.no_grad():
                images = pipe(prompt_embeds=prompt_embeds, latents=latents_init.clone(), num_inference_steps=steps,
                              guidance_scale=g, height=64, width=64, output_type="np",
                              callback_on_step_end=on_step_end,
                              callback_on_step_end_tensor_inputs=["latents", "denoised"]).images
        finally:
            scheduling_lcm.randn_tensor = real_randn
        assert len(used) == steps - 1, (steps, used)
        pipe_out[f"{key}.timesteps"] = pipe.scheduler.timesteps.clone().to(torch.int64)
        pipe_out[f"{key}.w_embedding"] = guidance_embedding([g] * 2, TIME_COND_PROJ_DIM)
        pipe_out[f"{key}.latents_steps"] = torch.stack(latents_steps)
        pipe_out[f"{key}.denoised_steps"] = torch.stack(denoised_steps)
        pipe_out[f"{key}.images"] = torch.from_numpy(images.copy()).to(torch.float32)
        print(key, "timesteps", pipe.scheduler.timesteps.tolist(), "image mean", float(images.mean()))
save(pipe_out, "pipeline.safetensors")
print("wrote", out)
