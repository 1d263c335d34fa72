"""Noise schedule, DDIM / PNDM(PLMS) samplers with classifier-free guidance, and the loader for
an exported diffusers folder — the torch counterpart of what the C++ pipeline does:
CFG batch [uncond; cond], noise = uncond + g * (cond - uncond), latents / scaling_factor -> VAE,
image = clamp(decoded/2 + 0.5, 0, 1)."""
import json
import os

import numpy as np
import torch

import clip_tokenizer
import models
import st_io


def alphas_cumprod(cfg):
    if cfg["beta_schedule"] == "linear":  # as diffusers: float32 linspace of the betas
        betas = torch.linspace(cfg["beta_start"], cfg["beta_end"], cfg["num_train_timesteps"], dtype=torch.float32)
    else:
        assert cfg["beta_schedule"] == "scaled_linear", cfg["beta_schedule"]
        betas = torch.linspace(cfg["beta_start"] ** 0.5, cfg["beta_end"] ** 0.5, cfg["num_train_timesteps"],
                               dtype=torch.float32) ** 2
    return torch.cumprod(1.0 - betas, dim=0)


def leading_timesteps(n, offset=1, train=1000):
    ratio = train // n
    return [int(round(i * ratio)) + offset for i in range(n)][::-1]


def to_epsilon(out, x, a_t, v_prediction):
    """The noise a model output stands for: itself, or from v = sqrt(a) eps - sqrt(1-a) x0 (diffusers)."""
    return a_t.sqrt() * out + (1 - a_t).sqrt() * x if v_prediction else out


def ddim_sample(eps_fn, x, ac, steps, v_prediction=False):
    """DDIM, eta 0, 'leading' spacing, steps_offset 1, set_alpha_to_one false (as diffusers)."""
    ratio = 1000 // steps
    for t in leading_timesteps(steps):
        eps = to_epsilon(eps_fn(x, t), x, ac[t], v_prediction)
        prev = t - ratio
        a_t = ac[t]
        a_p = ac[prev] if prev >= 0 else ac[0]
        x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        x = a_p.sqrt() * x0 + (1 - a_p).sqrt() * eps
    return x


def pndm_sample(eps_fn, x, ac, steps, v_prediction=False):
    """diffusers PNDMScheduler with skip_prk_steps (PLMS), torch pipeline: all steps+1 timesteps.
    With v_prediction the PLMS combination of the model outputs is converted, as diffusers'
    _get_prev_sample does (not each output on its own)."""
    ratio = 1000 // steps
    ts = [int(round(i * ratio)) + 1 for i in range(steps)]
    ts = (ts[:-1] + ts[-2:-1] + ts[-1:])[::-1]
    ets, counter, cur = [], 0, None

    def prev_sample(sample, t, tp, out):
        a_t, a_p = ac[t], (ac[tp] if tp >= 0 else ac[0])
        b_t, b_p = 1 - a_t, 1 - a_p
        out = to_epsilon(out, sample, a_t, v_prediction)
        denom = a_t * b_p.sqrt() + (a_t * b_t * a_p).sqrt()
        return (a_p / a_t).sqrt() * sample - (a_p - a_t) * out / denom

    for t in ts:
        out = eps_fn(x, t)
        tp = t - ratio
        if counter != 1:
            ets = ets[-3:]
            ets.append(out)
        else:
            tp, t = t, t + ratio
        if len(ets) == 1 and counter == 0:
            cur = x
        elif len(ets) == 1 and counter == 1:
            out = (out + ets[-1]) / 2
            x, cur = cur, None
        elif len(ets) == 2:
            out = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            out = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            out = (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4]) / 24
        x = prev_sample(x, t, tp, out)
        counter += 1
    return x


def lcm_timesteps(steps, original_steps=50, train=1000):
    """diffusers LCMScheduler.set_timesteps (v0.31, strength 1)."""
    origin = np.arange(1, original_steps + 1) * (train // original_steps) - 1
    idx = np.floor(np.linspace(0, original_steps, num=steps, endpoint=False)).astype(np.int64)
    return [int(t) for t in origin[::-1][idx]]


def lcm_boundary(t, timestep_scaling=10.0, sigma_data=0.5):
    """(c_skip, c_out) of LCMScheduler.get_scalings_for_boundary_condition_discrete; t may be a tensor."""
    st = t * timestep_scaling
    return sigma_data ** 2 / (st ** 2 + sigma_data ** 2), st / (st ** 2 + sigma_data ** 2) ** 0.5


def to_x0(out, x, a_t, v_prediction):
    """The clean latents a model output stands for (epsilon or v, as diffusers' schedulers)."""
    if v_prediction:
        return a_t.sqrt() * x - (1 - a_t).sqrt() * out
    return (x - (1 - a_t).sqrt() * out) / a_t.sqrt()


def lcm_sample(eps_fn, x, ac, steps, noise_fn, original_steps=50, v_prediction=False):
    """diffusers LCMScheduler (set_alpha_to_one true): denoised = c_out x0 + c_skip x; every step
    but the last re-noises the denoised latents to the next timestep with noise_fn(shape)."""
    ts = lcm_timesteps(steps, original_steps)
    for i, t in enumerate(ts):
        a_t = ac[t]
        x0 = to_x0(eps_fn(x, t), x, a_t, v_prediction)
        c_skip, c_out = lcm_boundary(float(t))
        denoised = c_out * x0 + c_skip * x
        if i + 1 < len(ts):
            a_p = ac[ts[i + 1]]
            x = a_p.sqrt() * denoised + (1 - a_p).sqrt() * noise_fn(x.shape)
        else:
            x = denoised
    return x


class Pipeline:
    """Loads a diffusers folder (ours) with our modules; generate() mirrors the SD pipeline."""

    def __init__(self, folder):
        def cfg(sub, name):
            with open(os.path.join(folder, sub, name)) as f:
                return json.load(f)

        def weights(m, sub, name):
            sd, _ = st_io.load(os.path.join(folder, sub, name))
            m.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()})
            return m.eval()

        self.tok = clip_tokenizer.CLIPTokenizer(os.path.join(folder, "tokenizer"))
        self.te = weights(models.CLIPTextModel(cfg("text_encoder", "config.json")), "text_encoder", "model.safetensors")
        self.unet = weights(models.UNet2DConditionModel(cfg("unet", "config.json")), "unet",
                            "diffusion_pytorch_model.safetensors")
        self.vae = weights(models.AutoencoderKL(cfg("vae", "config.json")), "vae", "diffusion_pytorch_model.safetensors")
        self.sched = cfg("scheduler", "scheduler_config.json")
        self.ac = alphas_cumprod(self.sched)
        self.v_prediction = self.sched.get("prediction_type", "epsilon") == "v_prediction"

    @torch.no_grad()
    def embed(self, prompts):
        return self.te(torch.tensor([self.tok.encode_padded(p) for p in prompts]))

    @torch.no_grad()
    def generate(self, prompts, seeds, guidance=7.5, negative=None, steps=20, sampler="ddim", latents=None,
                 as_float=False, output="image"):
        """Returns uint8 images [B,H,W,3] (float in [0,1] if as_float; the final UNet latents, as the
        UNet produces them, if output == "latents"). One torch.Generator per seed draws that image's
        initial latents unless `latents` is given."""
        n = len(prompts)
        cond = self.embed(prompts)
        uncond = self.embed(negative if negative is not None else [""] * n)
        s = self.unet.config["sample_size"]
        if latents is None:
            latents = torch.stack([torch.randn(self.unet.config["in_channels"], s, s,
                                               generator=torch.Generator().manual_seed(sd)) for sd in seeds])
        x = latents
        ctx = torch.cat([uncond, cond])

        cond_dim = self.unet.config.get("time_cond_proj_dim")
        if cond_dim:  # LCM-distilled UNet: guidance lives in the model, one pass per step
            w_emb = models.guidance_scale_embedding(torch.full((n,), guidance - 1.0), cond_dim)

        def eps_fn(x, t):
            if cond_dim:
                return self.unet(x, torch.tensor(t), cond, timestep_cond=w_emb)
            if guidance == 1.0:
                return self.unet(x, torch.tensor(t), cond)
            e = self.unet(torch.cat([x, x]), torch.tensor(t), ctx)
            eu, ec = e.chunk(2)
            return eu + guidance * (ec - eu)

        if sampler == "lcm":
            gens = [torch.Generator().manual_seed(10_000 + sd) for sd in seeds]
            noise = lambda shape: torch.stack([torch.randn(shape[1:], generator=g) for g in gens])  # noqa: E731
            x = lcm_sample(eps_fn, x, self.ac, steps, noise, self.sched.get("original_inference_steps", 50),
                           self.v_prediction)
        else:
            x = (ddim_sample if sampler == "ddim" else pndm_sample)(eps_fn, x, self.ac, steps, self.v_prediction)
        if output == "latents":
            return x
        return self.decode(x, as_float)

    @torch.no_grad()
    def decode(self, x, as_float=False):
        """UNet latents -> images with the VAE (latents / scaling_factor), post-processed as the pipeline."""
        return to_images(self.vae.decode(x / self.vae.config["scaling_factor"]), as_float)


def to_images(img, as_float=False):
    """Decoder output [B,3,H,W] in [-1,1] -> uint8 [B,H,W,3] (float in [0,1] if as_float)."""
    img = (img / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    if as_float:
        return img
    return np.rint(img * 255).astype(np.uint8)
