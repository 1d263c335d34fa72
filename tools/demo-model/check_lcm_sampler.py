"""Checks sampling.lcm_sample (our LCM loop) against diffusers' LCMScheduler.step on a fixed
eps function with the same injected noise, for 1/2/4/8 steps and original_inference_steps 50/20.
Exit code 1 on failure (max abs err <= 1e-5 * max|ref|).

  /usr/bin/python3 tools/demo-model/check_lcm_sampler.py
"""
import os
import sys

sys.path.insert(0, "/work/shared/tools")
import diffusers_env  # noqa: E402

diffusers_env.setup("/work/diffusers-v0.31.0")
import torch  # noqa: E402
from diffusers import LCMScheduler  # noqa: E402
import diffusers.schedulers.scheduling_lcm as sl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
import sampling  # noqa: E402


def eps_fn(x, t):
    return torch.tanh(x * 0.7 + t / 1000.0)


def main():
    torch.set_num_threads(1)
    ac = sampling.alphas_cumprod(configs.scheduler_config())
    ok = True
    for orig in (50, 20):
        for n in (1, 2, 4, 8):
            x0 = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(n))
            noises = [torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(100 + i)) for i in range(n)]
            it = iter(noises)
            ours = sampling.lcm_sample(eps_fn, x0, ac, n, lambda shape: next(it), orig)
            s = LCMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                             original_inference_steps=orig)
            s.set_timesteps(n)
            x = x0
            for i, t in enumerate(s.timesteps):
                # diffusers draws the step's noise with randn_tensor(generator): inject ours instead
                saved = sl.randn_tensor
                sl.randn_tensor = lambda *a, **k: noises[i].clone()
                try:
                    x = s.step(eps_fn(x, int(t)), t, x).prev_sample
                finally:
                    sl.randn_tensor = saved
            err, scale = float((ours - x).abs().max()), float(x.abs().max())
            good = err <= 1e-5 * max(1.0, scale)
            ok &= good
            print(f"original_inference_steps {orig}, {n} steps: max abs err {err:.2e} {'PASS' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
