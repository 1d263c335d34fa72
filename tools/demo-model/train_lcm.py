"""Latent consistency distillation (LCM, Luo et al. 2023, Algorithm 1; the diffusers
train_lcm_distill_sd_wds.py recipe) of the shipped demo UNet into a few-step LCM UNet
(UNet config time_cond_proj_dim, weight time_embedding.cond_proj; guidance lives in the model).

Per step, for a batch of dataset latents z (posterior samples x scaling_factor) and captions:
  n ~ U{0..N-1}, t = solver_timesteps[n] (N DDIM solver steps: t = 1000/N·(n+1) - 1), s = t - 1000/N (>= 0)
  w ~ U[w_min, w_max]  (teacher guidance scale 1 + w, like diffusers: x0 = x0_c + w (x0_c - x0_u));
  the student sees guidance_scale_embedding(w, 256) through cond_proj
  x_t = sqrt(a_t) z + sqrt(1-a_t) eps
  student  f(x_t, t) = c_skip(t) x_t + c_out(t) x0_student(x_t, t, w)         (LCMScheduler's c_skip/c_out)
  teacher  x_s = DDIM step t -> s with the guided x0 / eps of the frozen teacher (two passes)
  target   f_ema(x_s, s)  (EMA 0.95 of the student, no gradient)
  loss     pseudo-Huber(f - target), c = 0.001
Student and target start as the teacher with cond_proj = 0 (so at step 0 the student IS the teacher
for every w). The text encoder is the shipped one, frozen.

Resumable (work/lcm_ckpt.pt every ~3 min; wall-clock budget across resumes). Every --eval-every
steps: held-out agreement of the EMA model at 2/4/8 LCM steps, guidance 7.5 (12 prompts x 2 seeds).
At the end writes resources/demo-model-lcm/ (the demo model's text encoder, tokenizer, VAE, TAESD
copied; the LCM UNet as F16; LCMScheduler config with original_inference_steps = N).

  nice -n 5 /usr/bin/python3 tools/demo-model/train_lcm.py --minutes 40

Version 2 (--version 2): teacher = the staging folder work/v2/export (export.py --version 2: v2 UNet,
text encoder, tokenizer, factor-4 VAE; 16x16x4 latents), or --teacher DIR (e.g. work/v2/export_eval,
which eval_v2.py --from-ckpt writes from the running checkpoint); data = work/v2/latents.pt (see
shipped_data.py); checkpoint/log in work/v2/, output work/v2/export-lcm (staging, not resources/).
--work-dir / --out redirect the checkpoint+log / the folder (a smoke run to a scratch directory):

  nice -n 5 /usr/bin/python3 tools/demo-model/train_lcm.py --version 2 --minutes 50
  nice -n 5 /usr/bin/python3 tools/demo-model/train_lcm.py --version 2 --minutes 2.5 --eval-every 25 \
      --work-dir /tmp/lcm_smoke --out /tmp/lcm_smoke/out
"""
import argparse
import copy
import csv
import json
import os
import shutil
import sys
import time

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import sampling  # noqa: E402
import shape_class  # noqa: E402
import shipped_data  # noqa: E402
import st_io  # noqa: E402

CKPT = os.path.join(configs.WORK, "lcm_ckpt.pt")
BEST = os.path.join(configs.WORK, "lcm_best.pt")
LOG = os.path.join(configs.WORK, "lcm_loss.csv")
OUT = (os.path.join(configs.ROOT, "resources", "demo-model-lcm") if configs.VERSION == 1
       else os.path.join(configs.WORK, "export-lcm"))
COND_DIM = 256


def lcm_scheduler_config(original_steps):
    betas = {k: configs.scheduler_config().get(k, "epsilon") for k in
             ("beta_start", "beta_end", "beta_schedule", "prediction_type")}  # the teacher's
    return {"_class_name": "LCMScheduler", "_diffusers_version": "0.31.0", **betas, "clip_sample": False, "clip_sample_range": 1.0,
            "dynamic_thresholding_ratio": 0.995, "num_train_timesteps": 1000,
            "original_inference_steps": original_steps,
            "rescale_betas_zero_snr": False, "sample_max_value": 1.0, "set_alpha_to_one": True, "steps_offset": 1,
            "thresholding": False, "timestep_scaling": 10.0, "timestep_spacing": "leading", "trained_betas": None}


def make_student(teacher):
    cfg = dict(teacher.config, time_cond_proj_dim=COND_DIM)
    student = models.UNet2DConditionModel(cfg)
    missing, unexpected = student.load_state_dict(teacher.state_dict(), strict=False)
    assert missing == ["time_embedding.cond_proj.weight"] and not unexpected, (missing, unexpected)
    torch.nn.init.zeros_(student.time_embedding.cond_proj.weight)
    return student


V_PREDICTION = False  # the teacher's parameterisation (the student keeps it); set in main()


def x0_from_output(x, out, a):
    return sampling.to_x0(out, x, a, V_PREDICTION)


def eps_from_output(x, out, a):
    return sampling.to_epsilon(out, x, a, V_PREDICTION)


def bcast(v):
    return v[:, None, None, None]


def distill_loss(args, pipe, student, target, lat, uncond, gen):
    b, ac, n_solver = args.batch, pipe.ac, args.solver_steps
    skip = 1000 // n_solver
    idx = torch.from_numpy(gen.integers(0, len(lat["ids"]), b))
    mean, logvar = lat["mean"][idx], lat["logvar"][idx]
    z = (mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)) * lat["scaling_factor"]
    with torch.no_grad():
        ctx = pipe.te(lat["ids"][idx])
    n = torch.randint(0, n_solver, (b,))
    t = (n + 1) * skip - 1
    s = (t - skip).clamp(min=0)
    a_t, a_s = bcast(ac[t]), bcast(torch.where(t - skip >= 0, ac[s], ac[0]))
    w = args.w_min + (args.w_max - args.w_min) * torch.rand(b)
    w_emb = models.guidance_scale_embedding(w, COND_DIM)
    x_t = a_t.sqrt() * z + (1 - a_t).sqrt() * torch.randn_like(z)

    c_skip_t, c_out_t = (bcast(v) for v in sampling.lcm_boundary(t.float()))
    pred = c_skip_t * x_t + c_out_t * x0_from_output(x_t, student(x_t, t, ctx, timestep_cond=w_emb), a_t)
    with torch.no_grad():
        o = pipe.unet(torch.cat([x_t, x_t]), torch.cat([t, t]), torch.cat([ctx, uncond.expand(b, -1, -1)]))
        o_c, o_u = o.chunk(2)
        e_c, e_u = eps_from_output(x_t, o_c, a_t), eps_from_output(x_t, o_u, a_t)
        x0_c, x0_u = x0_from_output(x_t, o_c, a_t), x0_from_output(x_t, o_u, a_t)
        x0_g, e_g = x0_c + bcast(w) * (x0_c - x0_u), e_c + bcast(w) * (e_c - e_u)
        x_s = a_s.sqrt() * x0_g + (1 - a_s).sqrt() * e_g
        c_skip_s, c_out_s = (bcast(v) for v in sampling.lcm_boundary(s.float()))
        tgt = c_skip_s * x_s + c_out_s * x0_from_output(x_s, target(x_s, s, ctx, timestep_cond=w_emb), a_s)
    c = args.huber_c
    return (torch.sqrt((pred - tgt) ** 2 + c * c) - c).mean()


@torch.no_grad()
def quick_eval(pipe, unet, entries, seeds=(0, 1), guidance=7.5, steps=(2, 4, 8)):
    seeds = tuple(range(QUICK_SEEDS[0]))
    saved = pipe.unet, pipe.sched
    pipe.unet = unet.eval()
    pipe.sched = dict(saved[1], original_inference_steps=QUICK_SOLVER[0])
    out = {}
    E = [e for e in entries for _ in seeds]
    for n in steps:
        imgs = pipe.generate([e["prompt"] for e in E], [s for _ in entries for s in seeds], guidance=guidance,
                             steps=n, sampler="lcm")
        out[n] = sum(measure.agrees(e, measure.measure(i))[0] and shape_class.classify(i)["shape"] == e["shape"]
                     for e, i in zip(E, imgs)) / len(E)
    pipe.unet, pipe.sched = saved
    unet.train()
    return out


QUICK_SOLVER = [50]
QUICK_SEEDS = [2]


def train(args, pipe, lat, entries):
    torch.manual_seed(args.seed)
    student = make_student(pipe.unet)
    target = copy.deepcopy(student)
    for p in list(target.parameters()) + list(pipe.unet.parameters()) + list(pipe.te.parameters()):
        p.requires_grad_(False)
    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.0)
    step, used = 0, 0.0
    if os.path.exists(CKPT):
        ck = torch.load(CKPT)
        student.load_state_dict(ck["student"])
        target.load_state_dict(ck["target"])
        opt.load_state_dict(ck["opt"])
        step, used = ck["step"], ck["seconds"]
        print(f"resumed at step {step}, {used / 60:.1f} min used", flush=True)
    with torch.no_grad():
        uncond = pipe.te(lat["empty_ids"][None])
    gen = np.random.default_rng(args.seed * 1000 + step)
    budget, start, last_ckpt = args.minutes * 60, time.time() - used, time.time()
    new_log = not os.path.exists(LOG)
    logf = open(LOG, "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "seconds", "lr", "huber", "agree2", "agree4", "agree8"])
    acc, n_acc = 0.0, 0
    best = torch.load(BEST)["score"] if os.path.exists(BEST) else -1.0
    while True:
        frac = min(1.0, (time.time() - start) / budget)
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = distill_loss(args, pipe, student, target, lat, uncond, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        step += 1
        with torch.no_grad():
            for pt, ps in zip(target.parameters(), student.parameters()):
                pt.mul_(args.ema).add_(ps, alpha=1 - args.ema)
        acc += loss.item()
        n_acc += 1
        done = time.time() - start >= budget
        if step % 25 == 0 or done:
            ev = quick_eval(pipe, target, entries) if (step % args.eval_every == 0 or done) else {}
            log.writerow([step, round(time.time() - start, 1), f"{lr:.3g}", f"{acc / n_acc:.6f}",
                          ev.get(2, ""), ev.get(4, ""), ev.get(8, "")])
            logf.flush()
            score = (ev[4] + ev[8]) / 2 if ev else -1.0
            if score >= best:  # the EMA model with the best held-out score at 4 and 8 steps so far (the later on ties)
                best = score
                torch.save({"target": target.state_dict(), "step": step, "score": score, "eval": ev,
                            "args": vars(args)}, BEST + ".tmp")
                os.replace(BEST + ".tmp", BEST)
            print(f"step {step} {(time.time() - start) / 60:.1f}min lr {lr:.2e} huber {acc / n_acc:.5f}"
                  + (f" held-out agreement+shape ({QUICK_SEEDS[0]} seeds, g 7.5) 2/4/8 steps: {ev[2]:.3f} {ev[4]:.3f} {ev[8]:.3f}"
                     if ev else ""), flush=True)
            acc, n_acc = 0.0, 0
        if done or time.time() - last_ckpt > 180:
            torch.save({"student": student.state_dict(), "target": target.state_dict(), "opt": opt.state_dict(),
                        "step": step, "seconds": time.time() - start, "args": vars(args)}, CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
            last_ckpt = time.time()
        if done:
            break
    print(f"done: {step} steps in {(time.time() - start) / 60:.1f} min", flush=True)
    return target.eval()


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def export(unet, solver_steps, out=OUT, src=shipped_data.MODEL):
    """The teacher folder `src`'s text encoder, tokenizer and VAE + the LCM UNet and scheduler."""
    for sub in ("text_encoder", "tokenizer", "vae"):
        if os.path.isdir(os.path.join(src, sub)):
            shutil.copytree(os.path.join(src, sub), os.path.join(out, sub), dirs_exist_ok=True)
    with open(os.path.join(src, "model_index.json")) as f:
        index = json.load(f)
    index["_class_name"] = "LatentConsistencyModelPipeline"
    index["scheduler"] = ["diffusers", "LCMScheduler"]
    for k in ("image_encoder",):
        index.pop(k, None)
    write_json(os.path.join(out, "model_index.json"), index)
    write_json(os.path.join(out, "scheduler", "scheduler_config.json"), lcm_scheduler_config(solver_steps))
    write_json(os.path.join(out, "unet", "config.json"), unet.config)
    st_io.save(os.path.join(out, "unet", "diffusion_pytorch_model.safetensors"),
               {k: v.detach().numpy().astype(np.float16) for k, v in unet.state_dict().items()}, {"format": "pt"})
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print(f"exported {out}: {total / 1e6:.2f} MB", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=40.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--ema", type=float, default=0.95)
    ap.add_argument("--solver-steps", type=int, default=20, help="N DDIM solver steps (skip 1000/N)")
    ap.add_argument("--w-min", type=float, default=1.0)
    ap.add_argument("--w-max", type=float, default=8.0)
    ap.add_argument("--huber-c", type=float, default=0.001)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--export-only", action="store_true", help="write the folder from work/lcm_ckpt.pt's EMA model")
    ap.add_argument("--best", action="store_true", help="with --export-only: lcm_best.pt (the best quick check) instead")
    ap.add_argument("--quick-seeds", type=int, default=2, help="seeds per held-out prompt in the quick checks")
    ap.add_argument("--teacher", default=shipped_data.MODEL,
                    help="diffusers folder of the teacher (v1: resources/demo-model, v2: work/v2/export)")
    ap.add_argument("--work-dir", default=configs.WORK, help="where lcm_ckpt.pt and lcm_loss.csv go")
    ap.add_argument("--out", default=OUT, help="the LCM model folder written at the end")
    configs.add_version_arg(ap)
    args = ap.parse_args()
    global CKPT, LOG, BEST
    os.makedirs(args.work_dir, exist_ok=True)
    CKPT, LOG = os.path.join(args.work_dir, "lcm_ckpt.pt"), os.path.join(args.work_dir, "lcm_loss.csv")
    BEST = os.path.join(args.work_dir, "lcm_best.pt")
    QUICK_SEEDS[0] = args.quick_seeds
    torch.set_num_threads(2)
    QUICK_SOLVER[0] = args.solver_steps
    pipe = sampling.Pipeline(args.teacher)
    global V_PREDICTION
    V_PREDICTION = pipe.v_prediction
    print(f"teacher {args.teacher}: unet sample_size {pipe.unet.config['sample_size']}, "
          f"vae scaling_factor {pipe.vae.config['scaling_factor']}", flush=True)
    if args.export_only:
        ck = torch.load(BEST if args.best else CKPT)
        unet = make_student(pipe.unet)
        unet.load_state_dict(ck["target"])
        print(f"checkpoint: step {ck['step']}" + (f", quick check {ck['eval']}" if args.best
                                                  else f", {ck['seconds'] / 60:.1f} min"), flush=True)
        export(unet, ck["args"]["solver_steps"], args.out, args.teacher)
        return
    lat = shipped_data.ensure_latents(pipe)
    with open(os.path.join(configs.HERE, "heldout.json")) as f:
        entries = json.load(f)["prompts"]
    unet = train(args, pipe, lat, entries)
    export(unet, args.solver_steps, args.out, args.teacher)


if __name__ == "__main__":
    main()
