"""What the golden scripts of this folder share: the offline diffusers setup, the provenance they
stamp on their files, random UNets shaped like a tiny model's, model folders that reuse a tiny
model's components, and the stand-ins for diffusers' randn_tensor that inject saved noise.

A script imports it after its argparse (it sits beside the scripts, so `import tiny_models` works
when a script runs as tools/goldens/<name>.py):

    import tiny_models
    tiny_models.setup(args.diffusers, args.shared_tools)   # before numpy, torch or diffusers
    import torch ...

Nothing here draws a random number except random_unet_like (from its own seed).
"""
import json
import os
import sys


def setup(diffusers_tree, shared_tools):
    """diffusers (the v0.31.0 source tree) importable offline through shared_tools/diffusers_env,
    torch on one thread (OMP_NUM_THREADS=1 too) for bit-reproducible goldens."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, shared_tools)
    import diffusers_env

    diffusers_env.setup(diffusers_tree)
    import torch

    torch.set_num_threads(1)


def provenance(script):
    """The metadata every golden file carries: the diffusers and torch versions and the script."""
    import diffusers
    import torch

    return {"diffusers": diffusers.__version__, "torch": torch.__version__, "made_by": script}


def save_tensors(tensors, path, metadata):
    """A safetensors file of `tensors` (each made contiguous) with `metadata`."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)


def random_unet_like(unet_dir, seed, **changes):
    """A UNet2DConditionModel with the config of unet_dir (its "_" keys dropped) changed by
    `changes`, initialised by diffusers' defaults after torch.manual_seed(seed); in eval mode."""
    import torch
    from diffusers import UNet2DConditionModel

    config = dict(UNet2DConditionModel.load_config(unet_dir))
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    config.update(changes)
    torch.manual_seed(seed)
    return UNet2DConditionModel(**config).eval()


def write_model_folder(base, out, unet, shared_parts, pipeline_class, **index_changes):
    """OUT as a diffusers folder: `unet` saved in unet/, each of shared_parts a relative symlink to
    BASE's folder of that name, and BASE's model_index.json with _class_name = pipeline_class (and
    index_changes)."""
    unet.save_pretrained(os.path.join(out, "unet"), safe_serialization=True)
    rel = os.path.relpath(base, out)
    for part in shared_parts:
        link = os.path.join(out, part)
        if not os.path.islink(link):
            os.symlink(os.path.join(rel, part), link)
    index = json.load(open(os.path.join(base, "model_index.json")))
    index["_class_name"] = pipeline_class
    index.update(index_changes)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def returning(tensor):
    """A stand-in for diffusers' randn_tensor that returns a copy of `tensor` (and checks the shape
    asked for)."""

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        assert tuple(shape) == tuple(tensor.shape), shape
        return tensor.clone()

    return randn_tensor


def popping(queue):
    """A stand-in for diffusers' randn_tensor that returns a copy of the first tensor of the list
    `queue` and removes it (fill the list in place, queue[:] = [...], before each run)."""

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        drawn = queue.pop(0)
        assert tuple(shape) == tuple(drawn.shape), shape
        return drawn.clone()

    return randn_tensor


def wake_zero_modules(controlnet):
    """Re-initialises (diffusers' default initialisation) the modules a new ControlNet starts at zero
    (the conditioning embedding's conv_out, the down blocks' and mid block's output convolutions), so
    that a random ControlNet changes the run."""
    for m in [controlnet.controlnet_cond_embedding.conv_out, *controlnet.controlnet_down_blocks,
              controlnet.controlnet_mid_block]:
        m.reset_parameters()


def random_controlnet(unet, seed, order):
    """A random ControlNetModel shaped after `unet` (conditioning_embedding_out_channels (16, 32),
    controlnet_conditioning_channel_order `order`), drawn after torch.manual_seed(seed) with its zero
    modules woken; in eval mode."""
    import torch
    from diffusers import ControlNetModel

    torch.manual_seed(seed)
    cn = ControlNetModel.from_unet(unet, controlnet_conditioning_channel_order=order,
                                   conditioning_embedding_out_channels=(16, 32), load_weights_from_unet=False)
    wake_zero_modules(cn)
    return cn.eval()
